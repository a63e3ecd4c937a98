// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Function symbols by file offset (symtab.h): a 64-bit ELF file read piece by piece with
 * pread(), every offset and size checked against the file before it is used. */
#include "formats/symtab.h"

#include <elf.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <libiberty/demangle.h>

#define MAX_PHDRS 512
#define MAX_NOTES (64u << 10)

struct file {
	int fd;
	uint64_t size;
};

/* len bytes at off into buf, all of them within the file. */
static int rd(const struct file *f, uint64_t off, void *buf, size_t len)
{
	size_t got = 0;

	if (off > f->size || len > f->size - off)
		return -ENOEXEC;
	while (got < len) {
		ssize_t n = pread(f->fd, (char *)buf + got, len - got, (off_t)(off + got));

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -ENOEXEC;
		got += (size_t)n;
	}
	return 0;
}

/* A section's bytes, malloc'ed, at most LP_SYMTAB_MAX_BYTES. */
static int rd_alloc(const struct file *f, uint64_t off, uint64_t len, void **out)
{
	void *p;
	int r;

	if (len > LP_SYMTAB_MAX_BYTES)
		return -EFBIG;
	p = malloc(len ? len : 1);
	if (!p)
		return -ENOMEM;
	r = rd(f, off, p, (size_t)len);
	if (r < 0) {
		free(p);
		return r;
	}
	*out = p;
	return 0;
}

/* Looks through notes for the GNU build-id. */
static void scan_notes(struct lp_symtab *t, const uint8_t *p, size_t len)
{
	size_t at = 0;

	while (len - at >= sizeof(Elf64_Nhdr)) {
		Elf64_Nhdr nh;
		size_t name_sz, desc_sz;

		memcpy(&nh, p + at, sizeof(nh));
		at += sizeof(nh);
		name_sz = (nh.n_namesz + 3u) & ~3u;
		desc_sz = (nh.n_descsz + 3u) & ~3u;
		if (nh.n_namesz > len - at || name_sz > len - at || desc_sz > len - at - name_sz ||
		    nh.n_descsz > desc_sz)
			return;
		if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == 4 && !memcmp(p + at, "GNU", 4) &&
		    nh.n_descsz > 0 && nh.n_descsz <= LP_BUILD_ID_MAX) {
			memcpy(t->build_id, p + at + name_sz, nh.n_descsz);
			t->build_id_len = nh.n_descsz;
			return;
		}
		at += name_sz + desc_sz;
	}
}

static int read_note(struct lp_symtab *t, const struct file *f, uint64_t off, uint64_t len)
{
	void *p;
	int r;

	if (t->build_id_len || len > MAX_NOTES)
		return 0;
	r = rd_alloc(f, off, len, &p);
	if (r < 0)
		return r == -ENOMEM ? r : 0; /* a bad note is no build-id, not a bad file */
	scan_notes(t, p, (size_t)len);
	free(p);
	return 0;
}

static int by_off(const void *a, const void *b)
{
	const struct lp_symtab_fn *x = a, *y = b;

	return x->off < y->off ? -1 : x->off > y->off;
}

static unsigned underscores(const char *s)
{
	unsigned n = 0;

	while (s[n] == '_')
		n++;
	return n;
}

/* perf's choose_best_symbol() between two functions at one address: a size over none, not
 * weak over weak, global over local, fewer leading underscores, the longer name; else the
 * first. True when b is better than a. */
static bool better(const struct lp_symtab *t, const struct lp_symtab_fn *a,
		   const struct lp_symtab_fn *b)
{
	const char *na = t->names + a->name, *nb = t->names + b->name;
	size_t la, lb;

	if (!a->size != !b->size)
		return b->size != 0;
	if ((a->bind == STB_WEAK) != (b->bind == STB_WEAK))
		return a->bind == STB_WEAK;
	if ((a->bind == STB_GLOBAL) != (b->bind == STB_GLOBAL))
		return b->bind == STB_GLOBAL;
	if (underscores(na) != underscores(nb))
		return underscores(nb) < underscores(na);
	la = strlen(na);
	lb = strlen(nb);
	return lb > la;
}

static bool to_offset(const struct lp_symtab *loads, uint64_t vaddr, uint64_t *off)
{
	for (size_t i = 0; i < loads->nload; i++) {
		const struct lp_symtab_load *l = &loads->load[i];

		if (vaddr >= l->vaddr && vaddr - l->vaddr < l->memsz) {
			*off = vaddr - l->vaddr + l->offset;
			return true;
		}
	}
	return false;
}

/* The function symbols of one symbol table (its strings in str) into t. */
static int take_symbols(struct lp_symtab *t, const struct lp_symtab *loads, const Elf64_Sym *sym,
			size_t nsym, const char *str, size_t strsz)
{
	size_t cap = 0, pool_cap = 0;

	for (size_t i = 0; i < nsym; i++) {
		unsigned type = ELF64_ST_TYPE(sym[i].st_info);
		const char *name;
		size_t len;
		uint64_t off;

		if ((type != STT_FUNC && type != STT_GNU_IFUNC) || sym[i].st_shndx == SHN_UNDEF ||
		    sym[i].st_name == 0 || sym[i].st_name >= strsz ||
		    !to_offset(loads, sym[i].st_value, &off))
			continue;
		name = str + sym[i].st_name;
		len = strnlen(name, strsz - sym[i].st_name);
		if (len == 0 || len == strsz - sym[i].st_name || len > LP_SYMTAB_NAME_MAX)
			continue; /* empty, unterminated or oversized */
		if (t->n == cap) {
			size_t nc = cap ? 2 * cap : 1024;
			struct lp_symtab_fn *v = realloc(t->fn, nc * sizeof(*v));

			if (!v)
				return -ENOMEM;
			t->fn = v;
			cap = nc;
		}
		if (t->names_len + len + 1 > pool_cap) {
			size_t nc = pool_cap ? 2 * pool_cap : 65536;
			char *p;

			while (nc < t->names_len + len + 1)
				nc *= 2;
			if (!(p = realloc(t->names, nc)))
				return -ENOMEM;
			t->names = p;
			pool_cap = nc;
		}
		memcpy(t->names + t->names_len, name, len + 1);
		t->fn[t->n++] =
			(struct lp_symtab_fn){.off = off,
					      .size = sym[i].st_size,
					      .name = (uint32_t)t->names_len,
					      .bind = (uint8_t)ELF64_ST_BIND(sym[i].st_info)};
		t->names_len += len + 1;
		if (t->names_len > LP_SYMTAB_MAX_BYTES)
			return -EFBIG;
	}
	return 0;
}

/* Sorted by offset, one function per address (perf's choice among aliases). */
static void settle(struct lp_symtab *t)
{
	size_t k = 0;

	if (!t->n)
		return;
	qsort(t->fn, t->n, sizeof(*t->fn), by_off);
	for (size_t i = 1; i < t->n; i++) {
		if (t->fn[i].off == t->fn[k].off) {
			if (better(t, &t->fn[k], &t->fn[i]))
				t->fn[k] = t->fn[i];
			continue;
		}
		t->fn[++k] = t->fn[i];
	}
	t->n = k + 1;
}

int lp_symtab_read(int fd, const struct lp_symtab *loads, struct lp_symtab *out)
{
	struct file f = {.fd = fd};
	Elf64_Shdr *sh = NULL, *symsec = NULL;
	Elf64_Phdr *ph = NULL;
	char *shstr = NULL, *str = NULL;
	Elf64_Sym *sym = NULL;
	uint64_t shnum, shstrndx, shstrsz = 0;
	unsigned char ident[EI_NIDENT];
	Elf64_Ehdr eh;
	struct stat st;
	int r;

	memset(out, 0, sizeof(*out));
	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode))
		return -ENOEXEC;
	f.size = (uint64_t)st.st_size;
	if ((r = rd(&f, 0, ident, sizeof(ident))) < 0)
		return r;
	if (memcmp(ident, ELFMAG, SELFMAG) || ident[EI_CLASS] != ELFCLASS64 ||
	    ident[EI_DATA] != ELFDATA2LSB)
		return -ENOEXEC;
	if ((r = rd(&f, 0, &eh, sizeof(eh))) < 0)
		return r;
	/* Program headers: executable segments, and notes for the build-id. */
	if (eh.e_phnum && (eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phnum > MAX_PHDRS))
		return -ENOEXEC;
	if (eh.e_phnum) {
		if ((r = rd_alloc(&f, eh.e_phoff, (uint64_t)eh.e_phnum * sizeof(*ph),
				  (void **)&ph)))
			return r;
		for (size_t i = 0; i < eh.e_phnum && r == 0; i++) {
			if (ph[i].p_type == PT_LOAD && (ph[i].p_flags & PF_X) &&
			    out->nload < sizeof(out->load) / sizeof(out->load[0]))
				out->load[out->nload++] = (struct lp_symtab_load){
					ph[i].p_vaddr, ph[i].p_memsz, ph[i].p_offset};
			else if (ph[i].p_type == PT_NOTE)
				r = read_note(out, &f, ph[i].p_offset, ph[i].p_filesz);
		}
		free(ph);
		if (r < 0)
			goto out;
	}
	/* Section headers: the symbol tables, .gnu_debuglink, the build-id note. */
	shnum = eh.e_shnum;
	shstrndx = eh.e_shstrndx;
	if (eh.e_shoff && eh.e_shentsize != sizeof(Elf64_Shdr)) {
		r = -ENOEXEC;
		goto out;
	}
	if (eh.e_shoff && (shnum == 0 || shstrndx == SHN_XINDEX)) {
		Elf64_Shdr first;

		if ((r = rd(&f, eh.e_shoff, &first, sizeof(first))) < 0)
			goto out;
		if (shnum == 0)
			shnum = first.sh_size;
		if (shstrndx == SHN_XINDEX)
			shstrndx = first.sh_link;
	}
	if (!eh.e_shoff || !shnum)
		goto out; /* no sections: no symbols */
	if ((r = rd_alloc(&f, eh.e_shoff, shnum * sizeof(*sh), (void **)&sh)) < 0)
		goto out;
	if (shstrndx < shnum && sh[shstrndx].sh_type == SHT_STRTAB &&
	    rd_alloc(&f, sh[shstrndx].sh_offset, sh[shstrndx].sh_size, (void **)&shstr) == 0)
		shstrsz = sh[shstrndx].sh_size;
	for (uint64_t i = 0; i < shnum; i++) {
		const char *name = shstr && sh[i].sh_name < shstrsz ? shstr + sh[i].sh_name : "";
		size_t left = shstr && sh[i].sh_name < shstrsz ? shstrsz - sh[i].sh_name : 0;

		if (sh[i].sh_type == SHT_SYMTAB)
			symsec = &sh[i];
		else if (sh[i].sh_type == SHT_DYNSYM && (!symsec || symsec->sh_type != SHT_SYMTAB))
			symsec = &sh[i];
		else if (sh[i].sh_type == SHT_NOTE &&
			 (r = read_note(out, &f, sh[i].sh_offset, sh[i].sh_size)) < 0)
			goto out;
		else if (sh[i].sh_type == SHT_PROGBITS && strnlen(name, left) < left &&
			 !strcmp(name, ".gnu_debuglink") && sh[i].sh_size > 1) {
			size_t n = sh[i].sh_size < sizeof(out->debuglink) ? (size_t)sh[i].sh_size
									  : sizeof(out->debuglink);

			if (rd(&f, sh[i].sh_offset, out->debuglink, n) == 0 &&
			    strnlen(out->debuglink, n) < n && !strchr(out->debuglink, '/'))
				continue;
			out->debuglink[0] = '\0';
		}
	}
	if (!symsec)
		goto out;
	out->has_symtab = symsec->sh_type == SHT_SYMTAB;
	if (symsec->sh_entsize != sizeof(Elf64_Sym) || symsec->sh_link >= shnum ||
	    sh[symsec->sh_link].sh_type != SHT_STRTAB) {
		r = -ENOEXEC;
		goto out;
	}
	if ((r = rd_alloc(&f, symsec->sh_offset, symsec->sh_size, (void **)&sym)) < 0 ||
	    (r = rd_alloc(&f, sh[symsec->sh_link].sh_offset, sh[symsec->sh_link].sh_size,
			  (void **)&str)) < 0)
		goto out;
	r = take_symbols(out, loads ? loads : out, sym, symsec->sh_size / sizeof(*sym), str,
			 sh[symsec->sh_link].sh_size);
	if (r == 0)
		settle(out);
out:
	free(sh);
	free(shstr);
	free(sym);
	free(str);
	if (r < 0)
		lp_symtab_free(out);
	return r;
}

void lp_symtab_free(struct lp_symtab *t)
{
	free(t->fn);
	free(t->names);
	memset(t, 0, sizeof(*t));
}

const struct lp_symtab_fn *lp_symtab_find(const struct lp_symtab *t, uint64_t off)
{
	size_t lo = 0, hi = t->n;
	const struct lp_symtab_fn *f;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (t->fn[mid].off <= off)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0)
		return NULL;
	f = &t->fn[lo - 1];
	if (f->size)
		return off - f->off < f->size ? f : NULL;
	/* No size: up to the next function; the last one to the end of the page after its
	 * own, as perf's symbols__fixup_end() has it. */
	if (lo < t->n)
		return f;
	return off < ((f->off + 4095) & ~4095ULL) + 4096 ? f : NULL;
}

void lp_build_id_hex(const struct lp_symtab *t, char *out, size_t size)
{
	size_t n = 0;

	out[0] = '\0';
	for (size_t i = 0; i < t->build_id_len && n + 3 <= size; i++)
		n += (size_t)snprintf(out + n, size - n, "%02x", t->build_id[i]);
}

char *lp_demangle(const char *name)
{
	char *d;

	if (strncmp(name, "_Z", 2) != 0)
		return strdup(name);
	/* perf's default: DMGL_NO_OPTS, neither parameters nor return types. */
	d = cplus_demangle(name, DMGL_NO_OPTS);
	return d ? d : strdup(name);
}
