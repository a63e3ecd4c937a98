// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Symbol lookup with libelf: the same rules libbpf uses to turn a function name into a
 * uprobe offset (the PT_LOAD segment holding the address gives the file offset). */
#include "formats/elfsym.h"

#include <errno.h>
#include <fnmatch.h>
#include <gelf.h>
#include <libelf.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int lp_elf_name_match(const char *pattern, const char *name)
{
	if (strpbrk(pattern, "*?["))
		return fnmatch(pattern, name, 0) == 0;
	return strcmp(pattern, name) == 0;
}

static int match_class(const struct lp_elf_patterns *pat, const char *name)
{
	for (size_t c = 0; c < pat->nclasses; c++)
		for (const char *const *p = pat->lists[c]; p && *p; p++)
			if (lp_elf_name_match(*p, name))
				return (int)c;
	return -1;
}

static int vaddr_to_off(Elf *elf, uint64_t vaddr, uint64_t *off)
{
	size_t n;

	if (elf_getphdrnum(elf, &n))
		return -ENOEXEC;
	for (size_t i = 0; i < n; i++) {
		GElf_Phdr ph;

		if (!gelf_getphdr(elf, (int)i, &ph) || ph.p_type != PT_LOAD || !(ph.p_flags & PF_X))
			continue;
		if (vaddr >= ph.p_vaddr && vaddr < ph.p_vaddr + ph.p_memsz) {
			*off = vaddr - ph.p_vaddr + ph.p_offset;
			return 0;
		}
	}
	return -ENOENT;
}

/* Bytes of a function decoded for its probe site: prologues are short. */
#define PROLOGUE_BYTES 64

static int by_lo(const void *a, const void *b)
{
	const struct lp_x86_range *x = a, *y = b;

	return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* The cheap probe site of every x86-64 function found (x86entry.h), from the file's
 * image: decode each prologue, then drop the sites some direct branch in the file's code
 * lands on. */
static int find_sites(Elf *elf, struct lp_elf_result *out)
{
	struct lp_x86_range *r;
	size_t size, n = 0, nph;
	const uint8_t *img = (const uint8_t *)elf_rawfile(elf, &size);

	if (!img || !out->nsyms || elf_getphdrnum(elf, &nph))
		return 0;
	r = calloc(out->nsyms, sizeof(*r));
	if (!r)
		return -ENOMEM;
	for (size_t i = 0; i < out->nsyms; i++) {
		struct lp_elf_sym *s = &out->syms[i];
		size_t len = s->size && s->size < PROLOGUE_BYTES ? (size_t)s->size : PROLOGUE_BYTES;

		if (s->data || s->file_off >= size)
			continue;
		if (len > size - s->file_off)
			len = (size_t)(size - s->file_off);
		s->endbr = len >= 4 && !memcmp(img + s->file_off, "\xf3\x0f\x1e\xfa", 4);
		s->entry_skip = (uint32_t)lp_x86_entry_skip(img + s->file_off, len, &s->site);
		if (s->entry_skip)
			r[n++] = (struct lp_x86_range){
				.lo = s->vaddr, .hi = s->vaddr + s->entry_skip, .tag = i};
	}
	qsort(r, n, sizeof(*r), by_lo);
	for (size_t i = 0; i < nph && n; i++) {
		GElf_Phdr ph;

		if (!gelf_getphdr(elf, (int)i, &ph) || ph.p_type != PT_LOAD ||
		    !(ph.p_flags & PF_X) || ph.p_offset >= size)
			continue;
		lp_x86_mark_branched(img + ph.p_offset,
				     (size_t)(ph.p_filesz < size - ph.p_offset
						      ? ph.p_filesz
						      : size - ph.p_offset),
				     ph.p_vaddr, r, n);
	}
	for (size_t k = 0; k < n; k++)
		if (r[k].hit) {
			out->syms[r[k].tag].entry_skip = 0;
			out->syms[r[k].tag].site = LP_X86_ENTRY;
		}
	free(r);
	return 0;
}

static int push(struct lp_elf_result *r, size_t *cap, const char *name, int cls, uint64_t vaddr,
		uint64_t size, uint64_t off)
{
	for (size_t i = 0; i < r->nsyms; i++)
		if (r->syms[i].vaddr == vaddr)
			return 0;
	if (r->nsyms == *cap) {
		size_t ncap = *cap ? *cap * 2 : 16;
		struct lp_elf_sym *v = realloc(r->syms, ncap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		r->syms = v;
		*cap = ncap;
	}
	r->syms[r->nsyms] = (struct lp_elf_sym){
		.name = strdup(name), .cls = cls, .vaddr = vaddr, .size = size, .file_off = off};
	if (!r->syms[r->nsyms].name)
		return -ENOMEM;
	r->nsyms++;
	return 0;
}

static int scan_section(Elf *elf, Elf_Scn *scn, const GElf_Shdr *sh,
			const struct lp_elf_patterns *pat, struct lp_elf_result *out, size_t *cap)
{
	Elf_Data *data = elf_getdata(scn, NULL);
	size_t n;

	if (!data || sh->sh_entsize == 0)
		return 0;
	n = sh->sh_size / sh->sh_entsize;
	for (size_t i = 0; i < n; i++) {
		GElf_Sym sym;
		const char *name;
		uint64_t off = 0;
		int cls, r;

		bool obj;

		if (!gelf_getsym(data, (int)i, &sym) || sym.st_shndx == SHN_UNDEF ||
		    sym.st_value == 0)
			continue;
		obj = GELF_ST_TYPE(sym.st_info) == STT_OBJECT;
		if (GELF_ST_TYPE(sym.st_info) != STT_FUNC && !(obj && pat->data_classes))
			continue;
		name = elf_strptr(elf, sh->sh_link, sym.st_name);
		if (!name || !*name || (cls = match_class(pat, name)) < 0)
			continue;
		if (obj && (cls >= 64 || !(pat->data_classes & (1ULL << cls))))
			continue;
		/* a data object in .bss has no bytes in the file */
		if (vaddr_to_off(elf, sym.st_value, &off) < 0 && !obj)
			continue;
		r = push(out, cap, name, cls, sym.st_value, sym.st_size, obj ? 0 : off);
		if (r < 0)
			return r;
		for (size_t k = out->nsyms; obj && k-- > 0;)
			if (out->syms[k].vaddr == sym.st_value) {
				out->syms[k].data = true;
				break;
			}
	}
	return 0;
}

/* The whole file, read with pread() (see lp_elf_find()); at most LP_ELF_MAX_BYTES. */
#define LP_ELF_MAX_BYTES (2ULL << 30)
static int read_image(int fd, char **out, size_t *size)
{
	struct stat st;
	size_t off = 0;
	char *buf;

	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode) || st.st_size <= 0)
		return -ENOEXEC;
	if ((unsigned long long)st.st_size > LP_ELF_MAX_BYTES)
		return -EFBIG;
	buf = malloc((size_t)st.st_size);
	if (!buf)
		return -ENOMEM;
	while (off < (size_t)st.st_size) {
		ssize_t n = pread(fd, buf + off, (size_t)st.st_size - off, (off_t)off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			int r = n < 0 ? -errno : -EIO;

			free(buf);
			return r;
		}
		off += (size_t)n;
	}
	*out = buf;
	*size = off;
	return 0;
}

int lp_elf_find(int fd, const struct lp_elf_patterns *pat, struct lp_elf_result *out)
{
	Elf_Scn *scn = NULL;
	size_t cap = 0, size = 0;
	GElf_Ehdr eh;
	char *image = NULL;
	Elf *elf;
	int r = 0;

	memset(out, 0, sizeof(*out));
	if (elf_version(EV_CURRENT) == EV_NONE)
		return -EINVAL;
	/* Read, not mapped: a file mapping that may execute gets the int3 of every uprobe
	 * registered on the file written into it by the kernel (uprobe_mmap()), so with
	 * another llmprofd or tracer probing the file, a mapped image shows 0xcc where the
	 * code is and the probe sites come out wrong (seen: llama_decode at entry+0 while the
	 * quick start's service held its probe). read() sees the page cache, which uprobes
	 * leave alone. Read by us into one buffer: libelf's own ELF_C_READ leaks section data
	 * once elf_rawfile() reads the rest (elfutils 0.188). */
	r = read_image(fd, &image, &size);
	if (r < 0)
		return r;
	elf = elf_memory(image, size);
	if (!elf) {
		free(image);
		return -ENOEXEC;
	}
	if (elf_kind(elf) != ELF_K_ELF || !gelf_getehdr(elf, &eh)) {
		elf_end(elf);
		free(image);
		return -ENOEXEC;
	}
	/* .symtab first: it has the local symbols and names the same functions. */
	for (int pass = 0; pass < 2 && r == 0; pass++) {
		scn = NULL;
		while ((scn = elf_nextscn(elf, scn)) && r == 0) {
			GElf_Shdr sh;

			if (!gelf_getshdr(scn, &sh))
				continue;
			if (sh.sh_type != (pass == 0 ? SHT_SYMTAB : SHT_DYNSYM))
				continue;
			if (pass == 0)
				out->has_symtab = 1;
			r = scan_section(elf, scn, &sh, pat, out, &cap);
		}
	}
	if (r == 0 && pat->probe_sites && eh.e_machine == EM_X86_64)
		r = find_sites(elf, out);
	elf_end(elf);
	free(image);
	if (r < 0)
		lp_elf_result_free(out);
	return r;
}

/* pread() of exactly n bytes at off. */
static int read_at(int fd, void *buf, size_t n, uint64_t off)
{
	size_t done = 0;

	while (done < n) {
		ssize_t k = pread(fd, (char *)buf + done, n - done, (off_t)(off + done));

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return k < 0 ? -errno : -ENOEXEC;
		done += (size_t)k;
	}
	return 0;
}

/* The ELF header of a 64-bit little-endian file at fd: 0, -ENOEXEC (not one) or -errno. */
static int read_ehdr(int fd, Elf64_Ehdr *eh)
{
	int r = read_at(fd, eh, sizeof(*eh), 0);

	if (r < 0)
		return r;
	if (memcmp(eh->e_ident, ELFMAG, SELFMAG) || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
	    eh->e_ident[EI_DATA] != ELFDATA2LSB)
		return -ENOEXEC;
	return 0;
}

int lp_elf_section(int fd, const char *name, size_t max, char **buf, size_t *size)
{
	Elf64_Ehdr eh;
	Elf64_Shdr str, sh;
	char nm[32];
	size_t want = strlen(name) + 1;
	int r;

	*buf = NULL;
	*size = 0;
	if (want > sizeof(nm))
		return -EINVAL;
	if ((r = read_ehdr(fd, &eh)) < 0)
		return r;
	if (eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shstrndx == SHN_UNDEF ||
	    eh.e_shstrndx >= eh.e_shnum)
		return -ENOEXEC;
	if ((r = read_at(fd, &str, sizeof(str),
			 eh.e_shoff + (uint64_t)eh.e_shstrndx * sizeof(Elf64_Shdr))) < 0)
		return r;
	for (unsigned i = 1; i < eh.e_shnum; i++) {
		if ((r = read_at(fd, &sh, sizeof(sh), eh.e_shoff + (uint64_t)i * sizeof(sh))) < 0)
			return r;
		if (sh.sh_name >= str.sh_size || str.sh_size - sh.sh_name < want ||
		    read_at(fd, nm, want, str.sh_offset + sh.sh_name) < 0 || memcmp(nm, name, want))
			continue;
		if (sh.sh_type == SHT_NOBITS || !sh.sh_size)
			return -ENOENT;
		if (sh.sh_size > max)
			return -EFBIG;
		if (!(*buf = malloc(sh.sh_size)))
			return -ENOMEM;
		if ((r = read_at(fd, *buf, sh.sh_size, sh.sh_offset)) < 0) {
			free(*buf);
			*buf = NULL;
			return r;
		}
		*size = sh.sh_size;
		return 0;
	}
	return -ENOENT;
}

int lp_elf_tls_block_slot(int fd, uint64_t *slot)
{
	int64_t delta = 0; /* the executable segment's p_vaddr - p_offset */
	bool exec = false, tls = false;
	size_t size = 0;
	char *rela = NULL;
	Elf64_Ehdr eh;
	Elf64_Phdr ph;
	int r;

	*slot = 0;
	if ((r = read_ehdr(fd, &eh)) < 0)
		return r;
	if (eh.e_machine != EM_X86_64 || eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phnum > 256)
		return -ENOEXEC;
	for (unsigned i = 0; i < eh.e_phnum; i++) {
		if ((r = read_at(fd, &ph, sizeof(ph), eh.e_phoff + (uint64_t)i * sizeof(ph))) < 0)
			return r;
		tls |= ph.p_type == PT_TLS && ph.p_memsz > 0;
		if (ph.p_type == PT_LOAD && (ph.p_flags & PF_X) && !exec) {
			exec = true;
			delta = (int64_t)(ph.p_vaddr - ph.p_offset);
		}
	}
	if (!exec || !tls)
		return -ENOENT;
	if ((r = lp_elf_section(fd, ".rela.dyn", 64u << 20, &rela, &size)) < 0)
		return r;
	r = -ENOENT;
	for (size_t k = 0; k + sizeof(Elf64_Rela) <= size; k += sizeof(Elf64_Rela)) {
		Elf64_Rela e;

		memcpy(&e, rela + k, sizeof(e));
		if (ELF64_R_TYPE(e.r_info) == R_X86_64_TPOFF64 && ELF64_R_SYM(e.r_info) == 0 &&
		    e.r_addend == 0) {
			*slot = e.r_offset - (uint64_t)delta;
			r = 0;
			break;
		}
	}
	free(rela);
	return r;
}

void lp_elf_result_free(struct lp_elf_result *r)
{
	for (size_t i = 0; i < r->nsyms; i++)
		free(r->syms[i].name);
	free(r->syms);
	memset(r, 0, sizeof(*r));
}
