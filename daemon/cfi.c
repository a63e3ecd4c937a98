// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* .eh_frame to unwind rows (cfi.h). The file comes from another user: every read is
 * bounds-checked, and an entry that does not parse ends the walk with what came before. */
#include "cfi.h"

#include <errno.h>
#include <gelf.h>
#include <libelf.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* DWARF register numbers on x86-64. */
#define REG_RBP 6
#define REG_RSP 7
#define REG_RA 16

#define DW_EH_PE_omit 0xff
#define DW_EH_PE_pcrel 0x10

/* remember_state nesting a compiler emits is one or two deep. */
#define STATE_STACK 16

struct rd {
	const uint8_t *p, *end;
	bool bad;
};

static uint64_t rd_bytes(struct rd *r, size_t n)
{
	uint64_t v = 0;

	if (r->bad || (size_t)(r->end - r->p) < n) {
		r->bad = true;
		return 0;
	}
	for (size_t i = 0; i < n; i++)
		v |= (uint64_t)r->p[i] << (8 * i);
	r->p += n;
	return v;
}

/* A LEB128 number; signed ones sign-extended from their last byte. */
static uint64_t rd_leb(struct rd *r, bool is_signed)
{
	uint64_t v = 0;
	unsigned shift = 0;
	uint8_t b;

	do {
		b = (uint8_t)rd_bytes(r, 1);
		if (r->bad)
			return 0;
		if (shift < 64)
			v |= (uint64_t)(b & 0x7f) << shift;
		shift += 7;
	} while (b & 0x80);
	if (is_signed && shift < 64 && (b & 0x40))
		v |= ~(uint64_t)0 << shift;
	return v;
}

static uint64_t rd_uleb(struct rd *r)
{
	return rd_leb(r, false);
}

static int64_t rd_sleb(struct rd *r)
{
	return (int64_t)rd_leb(r, true);
}

/* A pointer in encoding enc; base is the address the section's first byte loads at. */
static uint64_t rd_ptr(struct rd *r, uint8_t enc, uint64_t vaddr, const uint8_t *start)
{
	uint64_t at = vaddr + (uint64_t)(r->p - start), v;

	if (enc == DW_EH_PE_omit)
		return 0;
	switch (enc & 0x0f) {
	case 0x00: /* absptr */
	case 0x04: /* udata8 */
	case 0x0c: /* sdata8 */
		v = rd_bytes(r, 8);
		break;
	case 0x01:
		v = rd_uleb(r);
		break;
	case 0x02:
		v = rd_bytes(r, 2);
		break;
	case 0x03:
		v = rd_bytes(r, 4);
		break;
	case 0x09:
		v = (uint64_t)rd_sleb(r);
		break;
	case 0x0a:
		v = (uint64_t)(int64_t)(int16_t)rd_bytes(r, 2);
		break;
	case 0x0b:
		v = (uint64_t)(int64_t)(int32_t)rd_bytes(r, 4);
		break;
	default:
		r->bad = true;
		return 0;
	}
	switch (enc & 0x70) {
	case 0x00:
		return v;
	case DW_EH_PE_pcrel:
		return v + at;
	default: /* textrel, datarel, funcrel, aligned: not in x86-64 .eh_frame */
		r->bad = true;
		return 0;
	}
}

/* A factored offset: wrapping, not overflowing, on hostile values (rows with offsets out
 * of range are refused later). */
static int64_t scaled(uint64_t v, int64_t factor)
{
	return (int64_t)(v * (uint64_t)factor);
}

enum rule_kind { R_SAME, R_UNDEF, R_OFFSET, R_OTHER };

struct rule {
	uint8_t kind;
	int64_t off;
};

struct state {
	int cfa_reg; /* DWARF register, or -1: an expression, or none yet */
	int64_t cfa_off;
	struct rule rbp, ra;
};

struct cie {
	uint64_t code_align;
	int64_t data_align;
	uint64_t ra_reg;
	uint8_t fde_enc;
	bool has_aug_data;
	const uint8_t *insns, *insns_end;
};

struct tmp_row {
	struct lp_cfi_row r;
	size_t seq;
	bool end;
};

struct builder {
	struct tmp_row *v;
	size_t n, cap;
	int err;
};

static void push_row(struct builder *b, uint64_t addr, const struct state *s, bool end,
		     uint64_t ra_reg)
{
	struct lp_cfi_row r = {.addr = addr};
	const struct rule *ra = ra_reg == REG_RBP ? &s->rbp : &s->ra;
	struct tmp_row *v;

	if (b->err)
		return;
	if (!end && ra_reg == REG_RA && ra->kind == R_OFFSET && ra->off == -8 && s->cfa_off >= 0) {
		if (s->cfa_reg == REG_RSP)
			r.cfa_reg = LP_CFI_RSP;
		else if (s->cfa_reg == REG_RBP)
			r.cfa_reg = LP_CFI_RBP;
		r.cfa_off = s->cfa_off;
		if (s->rbp.kind == R_SAME) {
			r.rbp = LP_CFI_RBP_SAME;
		} else if (s->rbp.kind == R_OFFSET) {
			r.rbp = LP_CFI_RBP_SAVED;
			r.rbp_off = s->rbp.off;
		} else {
			r.rbp = LP_CFI_RBP_LOST;
		}
	}
	if (r.cfa_reg == LP_CFI_NONE)
		r.cfa_off = 0, r.rbp = 0, r.rbp_off = 0;
	if (b->n == b->cap) {
		size_t cap = b->cap ? b->cap * 2 : 1024;

		v = realloc(b->v, cap * sizeof(*v));
		if (!v) {
			b->err = -ENOMEM;
			return;
		}
		b->v = v;
		b->cap = cap;
	}
	b->v[b->n] = (struct tmp_row){.r = r, .seq = b->n, .end = end};
	b->n++;
}

static struct rule *rule_of(struct state *s, uint64_t reg, uint64_t ra_reg)
{
	if (reg == REG_RBP)
		return &s->rbp;
	if (reg == ra_reg)
		return &s->ra;
	return NULL;
}

/* Runs call frame instructions from r over s. With b, rows are pushed as the location
 * advances from *loc (an FDE's); without, they set up a CIE's initial state. Returns
 * false on an instruction it cannot follow (the rest of the FDE is then unknown). */
static bool run(struct rd *r, const struct cie *c, struct state *s, const struct state *init,
		struct builder *b, uint64_t *loc, uint64_t vaddr, const uint8_t *start)
{
	struct state stack[STATE_STACK];
	int depth = 0;

	while (r->p < r->end && !r->bad) {
		uint8_t op = (uint8_t)rd_bytes(r, 1), hi = op >> 6, lo = op & 0x3f;
		uint64_t reg, delta = 0;
		bool advance = false;
		struct rule *x;

		if (hi == 1) {
			delta = lo * c->code_align;
			advance = true;
		} else if (hi == 2) {
			int64_t off = scaled(rd_uleb(r), c->data_align);

			if ((x = rule_of(s, lo, c->ra_reg)))
				*x = (struct rule){R_OFFSET, off};
		} else if (hi == 3) {
			if ((x = rule_of(s, lo, c->ra_reg)))
				*x = *rule_of((struct state *)init, lo, c->ra_reg);
		} else {
			switch (op) {
			case 0x00: /* nop */
				break;
			case 0x01: /* set_loc */
				if (!b)
					return false;
				delta = rd_ptr(r, c->fde_enc, vaddr, start);
				if (delta < *loc)
					return false;
				delta -= *loc;
				advance = true;
				break;
			case 0x02:
				delta = rd_bytes(r, 1) * c->code_align;
				advance = true;
				break;
			case 0x03:
				delta = rd_bytes(r, 2) * c->code_align;
				advance = true;
				break;
			case 0x04:
				delta = rd_bytes(r, 4) * c->code_align;
				advance = true;
				break;
			case 0x05: /* offset_extended */
				reg = rd_uleb(r);
				if ((x = rule_of(s, reg, c->ra_reg)))
					*x = (struct rule){R_OFFSET,
							   scaled(rd_uleb(r), c->data_align)};
				else
					rd_uleb(r);
				break;
			case 0x06: /* restore_extended */
				reg = rd_uleb(r);
				if ((x = rule_of(s, reg, c->ra_reg)))
					*x = *rule_of((struct state *)init, reg, c->ra_reg);
				break;
			case 0x07: /* undefined */
			case 0x08: /* same_value */
				reg = rd_uleb(r);
				if ((x = rule_of(s, reg, c->ra_reg)))
					*x = (struct rule){op == 0x07 ? R_UNDEF : R_SAME, 0};
				break;
			case 0x09: /* register */
				reg = rd_uleb(r);
				rd_uleb(r);
				if ((x = rule_of(s, reg, c->ra_reg)))
					*x = (struct rule){R_OTHER, 0};
				break;
			case 0x0a: /* remember_state: the whole row, CFA included (as GCC) */
				if (depth == STATE_STACK)
					return false;
				stack[depth++] = *s;
				break;
			case 0x0b: /* restore_state */
				if (depth == 0)
					return false;
				*s = stack[--depth];
				break;
			case 0x0c: /* def_cfa */
				s->cfa_reg = (int)(rd_uleb(r) & 0xffff);
				s->cfa_off = (int64_t)rd_uleb(r);
				break;
			case 0x0d: /* def_cfa_register */
				s->cfa_reg = (int)(rd_uleb(r) & 0xffff);
				break;
			case 0x0e: /* def_cfa_offset */
				s->cfa_off = (int64_t)rd_uleb(r);
				break;
			case 0x0f: /* def_cfa_expression */
				delta = rd_uleb(r);
				if (delta > (uint64_t)(r->end - r->p))
					return false;
				r->p += delta;
				delta = 0;
				s->cfa_reg = -1;
				break;
			case 0x10: /* expression */
			case 0x16: /* val_expression */
				reg = rd_uleb(r);
				delta = rd_uleb(r);
				if (delta > (uint64_t)(r->end - r->p))
					return false;
				r->p += delta;
				delta = 0;
				if ((x = rule_of(s, reg, c->ra_reg)))
					*x = (struct rule){R_OTHER, 0};
				break;
			case 0x11: /* offset_extended_sf */
				reg = rd_uleb(r);
				if ((x = rule_of(s, reg, c->ra_reg)))
					*x = (struct rule){R_OFFSET, scaled((uint64_t)rd_sleb(r),
									    c->data_align)};
				else
					rd_sleb(r);
				break;
			case 0x12: /* def_cfa_sf */
				s->cfa_reg = (int)(rd_uleb(r) & 0xffff);
				s->cfa_off = scaled((uint64_t)rd_sleb(r), c->data_align);
				break;
			case 0x13: /* def_cfa_offset_sf */
				s->cfa_off = scaled((uint64_t)rd_sleb(r), c->data_align);
				break;
			case 0x14: /* val_offset */
			case 0x15: /* val_offset_sf */
				reg = rd_uleb(r);
				if (op == 0x14)
					rd_uleb(r);
				else
					rd_sleb(r);
				if ((x = rule_of(s, reg, c->ra_reg)))
					*x = (struct rule){R_OTHER, 0};
				break;
			case 0x2e: /* GNU_args_size */
				rd_uleb(r);
				break;
			case 0x2f: /* GNU_negative_offset_extended */
				reg = rd_uleb(r);
				if ((x = rule_of(s, reg, c->ra_reg)))
					*x = (struct rule){R_OFFSET,
							   scaled(0 - rd_uleb(r), c->data_align)};
				else
					rd_uleb(r);
				break;
			default:
				return false;
			}
		}
		if (r->bad)
			return false;
		if (advance) {
			if (!b)
				return false; /* a CIE does not move */
			if (delta) {
				push_row(b, *loc, s, false, c->ra_reg);
				*loc += delta;
			}
		}
	}
	return !r->bad;
}

/* The CIE at p (its length field); false if it does not parse. */
static bool read_cie(const uint8_t *p, const uint8_t *end, uint64_t vaddr, const uint8_t *start,
		     struct cie *c, struct state *init)
{
	struct rd r = {p, end, false};
	uint64_t len = rd_bytes(&r, 4), id;
	const uint8_t *aug, *body_end, *aug_end = NULL;
	uint8_t version;
	struct rd ins;

	if (len == 0xffffffff) {
		len = rd_bytes(&r, 8);
		if (r.bad || len > (uint64_t)(end - r.p))
			return false;
		body_end = r.p + len;
		id = rd_bytes(&r, 8);
	} else {
		if (r.bad || len > (uint64_t)(end - r.p))
			return false;
		body_end = r.p + len;
		id = rd_bytes(&r, 4);
	}
	if (r.bad || id != 0)
		return false;
	r.end = body_end;
	memset(c, 0, sizeof(*c));
	c->fde_enc = 0; /* absptr unless 'R' says */
	version = (uint8_t)rd_bytes(&r, 1);
	if (version != 1 && version != 3 && version != 4)
		return false;
	aug = r.p;
	while (r.p < r.end && *r.p)
		r.p++;
	if (r.p == r.end)
		return false;
	r.p++;
	if (strstr((const char *)aug, "eh"))
		rd_bytes(&r, 8);
	if (version == 4)
		rd_bytes(&r, 2); /* address and segment selector sizes */
	c->code_align = rd_uleb(&r);
	c->data_align = rd_sleb(&r);
	c->ra_reg = version == 1 ? rd_bytes(&r, 1) : rd_uleb(&r);
	if (aug[0] == 'z') {
		uint64_t alen = rd_uleb(&r);

		if (r.bad || alen > (uint64_t)(r.end - r.p))
			return false;
		aug_end = r.p + alen;
		c->has_aug_data = true;
		for (const uint8_t *a = aug + 1; *a && !r.bad; a++) {
			if (*a == 'R') {
				c->fde_enc = (uint8_t)rd_bytes(&r, 1);
			} else if (*a == 'L') {
				rd_bytes(&r, 1);
			} else if (*a == 'P') {
				uint8_t enc = (uint8_t)rd_bytes(&r, 1);

				rd_ptr(&r, enc, vaddr, start); /* the personality routine */
			} else if (*a != 'S' && *a != 'B' && *a != 'G') {
				break;
			}
		}
		r.p = aug_end;
	} else if (aug[0]) {
		return false; /* an augmentation we cannot skip */
	}
	if (r.bad || c->code_align == 0)
		return false;
	c->insns = r.p;
	c->insns_end = r.end;
	memset(init, 0, sizeof(*init));
	init->cfa_reg = -1;
	init->rbp.kind = R_SAME;
	init->ra.kind = R_UNDEF;
	ins = (struct rd){c->insns, c->insns_end, false};
	return run(&ins, c, init, init, NULL, NULL, vaddr, start);
}

static int by_addr(const void *a, const void *b)
{
	const struct tmp_row *x = a, *y = b;

	if (x->r.addr != y->r.addr)
		return x->r.addr < y->r.addr ? -1 : 1;
	/* At one address an FDE's end gives way to the next one's start. */
	if (x->end != y->end)
		return x->end ? -1 : 1;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static bool same_rule(const struct lp_cfi_row *a, const struct lp_cfi_row *b)
{
	return a->cfa_reg == b->cfa_reg && a->cfa_off == b->cfa_off && a->rbp == b->rbp &&
	       a->rbp_off == b->rbp_off;
}

int lp_cfi_parse(const uint8_t *data, size_t len, uint64_t vaddr, struct lp_cfi *out)
{
	const uint8_t *p = data, *end = data + len;
	struct builder b = {0};
	size_t fdes = 0, k = 0;

	memset(out, 0, sizeof(*out));
	while ((size_t)(end - p) >= 4) {
		struct rd r = {p, end, false};
		uint64_t elen = rd_bytes(&r, 4), id, pc, range, loc;
		const uint8_t *id_at, *body_end;
		struct state init, s;
		struct cie c;
		bool wide = false;

		if (elen == 0)
			break; /* the terminator */
		if (elen == 0xffffffff) {
			elen = rd_bytes(&r, 8);
			wide = true;
		}
		if (r.bad || elen > (uint64_t)(end - r.p) || elen < 4)
			break;
		body_end = r.p + elen;
		id_at = r.p;
		id = rd_bytes(&r, wide ? 8 : 4);
		r.end = body_end;
		p = body_end;
		if (id == 0)
			continue; /* a CIE: read when an FDE points at it */
		if (id > (uint64_t)(id_at - data))
			continue;
		if (!read_cie(id_at - id, end, vaddr, data, &c, &init))
			continue;
		pc = rd_ptr(&r, c.fde_enc, vaddr, data);
		range = rd_ptr(&r, c.fde_enc & 0x0f, vaddr, data);
		if (c.has_aug_data) {
			uint64_t alen = rd_uleb(&r);

			if (r.bad || alen > (uint64_t)(r.end - r.p))
				continue;
			r.p += alen;
		}
		if (r.bad || range == 0 || pc + range < pc)
			continue;
		fdes++;
		s = init;
		loc = pc;
		if (!run(&r, &c, &s, &init, &b, &loc, vaddr, data))
			s.cfa_reg = -1; /* unknown from here on */
		if (loc < pc + range)
			push_row(&b, loc, &s, false, c.ra_reg);
		push_row(&b, pc + range, &s, true, c.ra_reg);
	}
	if (b.err) {
		free(b.v);
		return b.err;
	}
	if (!b.n) {
		free(b.v);
		return fdes ? 0 : -EINVAL;
	}
	qsort(b.v, b.n, sizeof(*b.v), by_addr);
	out->rows = malloc(b.n * sizeof(*out->rows));
	if (!out->rows) {
		free(b.v);
		return -ENOMEM;
	}
	for (size_t i = 0; i < b.n; i++) {
		const struct lp_cfi_row *r = &b.v[i].r;

		/* The last row at one address wins; then no row repeats the one before. */
		if (k && out->rows[k - 1].addr == r->addr)
			k--;
		if (k && same_rule(&out->rows[k - 1], r))
			continue;
		out->rows[k++] = *r;
	}
	out->n = k;
	out->fdes = fdes;
	free(b.v);
	return 0;
}

const struct lp_cfi_row *lp_cfi_find(const struct lp_cfi *c, uint64_t addr)
{
	size_t lo = 0, hi = c->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (c->rows[mid].addr <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo ? &c->rows[lo - 1] : NULL;
}

/* Rows by file offset: each row's address through the executable PT_LOAD segment that
 * holds it (an end row may sit just past one). */
static int to_file_offsets(Elf *elf, struct lp_cfi *c)
{
	size_t nph, k = 0;

	if (elf_getphdrnum(elf, &nph))
		return -ENOEXEC;
	for (size_t i = 0; i < c->n; i++) {
		struct lp_cfi_row r = c->rows[i];
		bool found = false;

		for (size_t j = 0; j < nph && !found; j++) {
			GElf_Phdr ph;

			if (!gelf_getphdr(elf, (int)j, &ph) || ph.p_type != PT_LOAD ||
			    !(ph.p_flags & PF_X))
				continue;
			if (r.addr >= ph.p_vaddr &&
			    (r.addr < ph.p_vaddr + ph.p_memsz ||
			     (r.cfa_reg == LP_CFI_NONE && r.addr == ph.p_vaddr + ph.p_memsz))) {
				r.addr = r.addr - ph.p_vaddr + ph.p_offset;
				found = true;
			}
		}
		if (found)
			c->rows[k++] = r;
	}
	c->n = k;
	return 0;
}

int lp_cfi_read(int fd, struct lp_cfi *out)
{
	Elf *elf;
	Elf_Scn *scn = NULL;
	GElf_Ehdr eh;
	size_t shstrndx;
	int r = -ENOENT;

	memset(out, 0, sizeof(*out));
	if (elf_version(EV_CURRENT) == EV_NONE)
		return -ENOEXEC;
	elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	if (!elf)
		return -ENOEXEC;
	if (elf_kind(elf) != ELF_K_ELF || !gelf_getehdr(elf, &eh) ||
	    eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_machine != EM_X86_64 ||
	    elf_getshdrstrndx(elf, &shstrndx)) {
		elf_end(elf);
		return -ENOEXEC;
	}
	while ((scn = elf_nextscn(elf, scn))) {
		GElf_Shdr sh;
		const char *name;
		Elf_Data *d;

		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_PROGBITS)
			continue;
		name = elf_strptr(elf, shstrndx, sh.sh_name);
		if (!name || strcmp(name, ".eh_frame") != 0)
			continue;
		d = elf_getdata(scn, NULL);
		if (!d || !d->d_buf || !d->d_size)
			break;
		r = lp_cfi_parse(d->d_buf, d->d_size, sh.sh_addr, out);
		if (r == 0)
			r = to_file_offsets(elf, out);
		break;
	}
	elf_end(elf);
	if (r < 0)
		lp_cfi_free(out);
	return r;
}

void lp_cfi_free(struct lp_cfi *c)
{
	free(c->rows);
	memset(c, 0, sizeof(*c));
}
