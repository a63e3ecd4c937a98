// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* .eh_frame to unwind rows (cfi.h). The file comes from another user: every read is
 * bounds-checked, and an entry that does not parse ends the walk with what came before. */
#include "formats/cfi.h"

#include <errno.h>
#include <gelf.h>
#include <libelf.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <linux/types.h>

#include "llmprof/abi.h"

#define REG_RBP LP_DW_RBP
#define REG_RSP LP_DW_RSP
#define REG_RA LP_DW_RA

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

/* A register's rule: unchanged, undefined, saved at CFA + off, saved at reg + off (a
 * DW_CFA_expression of one DW_OP_breg), or anything else. */
enum rule_kind { R_SAME, R_UNDEF, R_OFFSET, R_AT_REG, R_OTHER };

struct rule {
	uint8_t kind;
	uint8_t reg;
	int64_t off;
};

/* The CFA's rule: enum lp_cfi_cfa's forms, or one of these. */
enum { C_EXPR = 0x80, C_UNKNOWN };

struct state {
	uint8_t cfa; /* LP_CFI_REG, LP_CFI_DEREF, LP_CFI_PLT, C_EXPR, C_UNKNOWN */
	uint8_t cfa_reg;
	int64_t cfa_off; /* LP_CFI_PLT: the threshold on (ip & 15) */
	struct rule rbp, ra;
};

struct cie {
	uint64_t code_align;
	int64_t data_align;
	uint64_t ra_reg;
	uint8_t fde_enc;
	bool has_aug_data;
	bool signal; /* 'S': a signal trampoline */
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

/* The row the state gives: the forms cfi.h lists, or LP_CFI_NONE and why. */
static struct lp_cfi_row row_of(const struct state *s, const struct cie *c, uint64_t addr)
{
	struct lp_cfi_row r = {.addr = addr, .why = LP_CFI_WHY_RA};
	const struct rule *ra = &s->ra;

	if (c->ra_reg != REG_RA)
		return r;
	if (s->cfa == C_UNKNOWN) {
		r.why = LP_CFI_WHY_INSN;
		return r;
	}
	/* The kernel's rt_sigframe: the interrupted %rsp, then %rip, saved at fixed offsets
	 * from %rsp (glibc's __restore_rt describes them so). */
	if (c->signal && s->cfa == LP_CFI_DEREF && s->cfa_reg == REG_RSP && ra->kind == R_AT_REG &&
	    ra->reg == REG_RSP && ra->off == s->cfa_off + 8 && s->rbp.kind == R_AT_REG &&
	    s->rbp.reg == REG_RSP) {
		r.cfa = LP_CFI_SIGNAL;
		r.why = 0;
		r.cfa_reg = REG_RSP;
		r.cfa_off = s->cfa_off;
		r.rbp = LP_CFI_RBP_SAVED;
		r.rbp_off = s->rbp.off;
		return r;
	}
	if (ra->kind == R_UNDEF) {
		r.cfa = LP_CFI_END;
		r.why = 0;
		return r;
	}
	if (ra->kind != R_OFFSET || ra->off != -8)
		return r;
	if (s->cfa == C_EXPR) {
		r.why = LP_CFI_WHY_EXPR;
		return r;
	}
	r.cfa = s->cfa;
	r.why = 0;
	r.cfa_reg = s->cfa_reg;
	r.cfa_off = s->cfa_off;
	switch (s->rbp.kind) {
	case R_SAME:
		r.rbp = LP_CFI_RBP_SAME;
		break;
	case R_OFFSET:
		r.rbp = LP_CFI_RBP_SAVED;
		r.rbp_off = s->rbp.off;
		break;
	case R_AT_REG:
		r.rbp = s->rbp.reg == REG_RBP ? LP_CFI_RBP_AT_RBP : LP_CFI_RBP_LOST;
		r.rbp_off = s->rbp.reg == REG_RBP ? s->rbp.off : 0;
		break;
	default:
		r.rbp = LP_CFI_RBP_LOST;
	}
	return r;
}

static void push_row(struct builder *b, uint64_t addr, const struct state *s, bool end,
		     const struct cie *c)
{
	struct lp_cfi_row r = {.addr = addr, .why = LP_CFI_WHY_NO_FDE};
	struct tmp_row *v;

	if (b->err)
		return;
	if (!end)
		r = row_of(s, c, addr);
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

/* A DWARF expression of the forms cfi.h lists: DW_OP_breg<r> off (C: LP_CFI_REG), the
 * same then DW_OP_deref (LP_CFI_DEREF), binutils' PLT expression (LP_CFI_PLT); anything
 * else is C_EXPR. */
static uint8_t read_expr(const uint8_t *p, uint64_t len, uint8_t *reg, int64_t *off)
{
	/* DW_OP_breg7 8; DW_OP_breg16 0; DW_OP_lit15; DW_OP_and; DW_OP_lit<k>; DW_OP_ge;
	 * DW_OP_lit3; DW_OP_shl; DW_OP_plus: rsp + 8 + ((rip & 15) >= k) << 3. */
	static const uint8_t plt[] = {0x77, 0x08, 0x80, 0x00, 0x3f, 0x1a,
				      0x00, 0x2a, 0x33, 0x24, 0x22};
	struct rd r = {p, p + len, false};
	uint64_t regno;
	uint8_t op;

	if (len == sizeof(plt) && p[6] >= 0x30 && p[6] <= 0x3f && !memcmp(p, plt, 6) &&
	    !memcmp(p + 7, plt + 7, sizeof(plt) - 7)) {
		*reg = REG_RSP;
		*off = p[6] - 0x30;
		return LP_CFI_PLT;
	}
	op = (uint8_t)rd_bytes(&r, 1);
	if (op >= 0x70 && op <= 0x8f) /* DW_OP_breg0..31 */
		regno = op - 0x70;
	else if (op == 0x92) /* DW_OP_bregx */
		regno = rd_uleb(&r);
	else
		return C_EXPR;
	*off = rd_sleb(&r);
	if (r.bad || regno > REG_RA)
		return C_EXPR;
	*reg = (uint8_t)regno;
	if (r.p == r.end)
		return LP_CFI_REG;
	if (*r.p == 0x06 && r.p + 1 == r.end) /* DW_OP_deref */
		return LP_CFI_DEREF;
	return C_EXPR;
}

/* DW_CFA_def_cfa and its kin: a register plus an offset from here on. */
static void set_cfa_reg(struct state *s, uint64_t reg)
{
	s->cfa = reg <= REG_RA ? LP_CFI_REG : C_EXPR;
	s->cfa_reg = (uint8_t)(reg <= REG_RA ? reg : 0);
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
				*x = (struct rule){R_OFFSET, 0, off};
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
					*x = (struct rule){R_OFFSET, 0,
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
					*x = (struct rule){op == 0x07 ? R_UNDEF : R_SAME, 0, 0};
				break;
			case 0x09: /* register */
				reg = rd_uleb(r);
				rd_uleb(r);
				if ((x = rule_of(s, reg, c->ra_reg)))
					*x = (struct rule){R_OTHER, 0, 0};
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
				set_cfa_reg(s, rd_uleb(r));
				s->cfa_off = (int64_t)rd_uleb(r);
				break;
			case 0x0d: /* def_cfa_register */
				set_cfa_reg(s, rd_uleb(r));
				break;
			case 0x0e: /* def_cfa_offset */
				s->cfa_off = (int64_t)rd_uleb(r);
				break;
			case 0x0f: /* def_cfa_expression */
				delta = rd_uleb(r);
				if (delta > (uint64_t)(r->end - r->p))
					return false;
				s->cfa = read_expr(r->p, delta, &s->cfa_reg, &s->cfa_off);
				r->p += delta;
				delta = 0;
				break;
			case 0x10: /* expression: saved at the address it computes */
			case 0x16: /* val_expression: the value it computes */
				reg = rd_uleb(r);
				delta = rd_uleb(r);
				if (delta > (uint64_t)(r->end - r->p))
					return false;
				if ((x = rule_of(s, reg, c->ra_reg))) {
					struct rule e = {R_OTHER, 0, 0};

					if (op == 0x10 &&
					    read_expr(r->p, delta, &e.reg, &e.off) == LP_CFI_REG)
						e.kind = R_AT_REG;
					*x = e;
				}
				r->p += delta;
				delta = 0;
				break;
			case 0x11: /* offset_extended_sf */
				reg = rd_uleb(r);
				if ((x = rule_of(s, reg, c->ra_reg)))
					*x = (struct rule){
						R_OFFSET, 0,
						scaled((uint64_t)rd_sleb(r), c->data_align)};
				else
					rd_sleb(r);
				break;
			case 0x12: /* def_cfa_sf */
				set_cfa_reg(s, rd_uleb(r));
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
					*x = (struct rule){R_OTHER, 0, 0};
				break;
			case 0x2e: /* GNU_args_size */
				rd_uleb(r);
				break;
			case 0x2f: /* GNU_negative_offset_extended */
				reg = rd_uleb(r);
				if ((x = rule_of(s, reg, c->ra_reg)))
					*x = (struct rule){R_OFFSET, 0,
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
				push_row(b, *loc, s, false, c);
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
			if (*a == 'S') {
				c->signal = true;
			} else if (*a == 'R') {
				c->fde_enc = (uint8_t)rd_bytes(&r, 1);
			} else if (*a == 'L') {
				rd_bytes(&r, 1);
			} else if (*a == 'P') {
				uint8_t enc = (uint8_t)rd_bytes(&r, 1);

				rd_ptr(&r, enc, vaddr, start); /* the personality routine */
			} else if (*a != 'B' && *a != 'G') {
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
	init->cfa = C_UNKNOWN;
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

bool lp_cfi_same_rule(const struct lp_cfi_row *a, const struct lp_cfi_row *b)
{
	return a->cfa == b->cfa && a->cfa_reg == b->cfa_reg && a->cfa_off == b->cfa_off &&
	       a->rbp == b->rbp && a->rbp_off == b->rbp_off && a->why == b->why;
}

/* The rows the FDEs pushed, sorted into out's table; b's are freed. 0 or -ENOMEM. */
static int table(struct builder *b, struct lp_cfi *out)
{
	size_t k = 0;

	qsort(b->v, b->n, sizeof(*b->v), by_addr);
	out->rows = malloc(b->n * sizeof(*out->rows));
	if (!out->rows) {
		free(b->v);
		return -ENOMEM;
	}
	for (size_t i = 0; i < b->n; i++) {
		const struct lp_cfi_row *r = &b->v[i].r;

		/* The last row at one address wins; then no row repeats the one before. */
		if (k && out->rows[k - 1].addr == r->addr)
			k--;
		if (k && lp_cfi_same_rule(&out->rows[k - 1], r))
			continue;
		out->rows[k++] = *r;
	}
	out->n = k;
	free(b->v);
	return 0;
}

int lp_cfi_parse(const uint8_t *data, size_t len, uint64_t vaddr, struct lp_cfi *out)
{
	const uint8_t *p = data, *end = data + len;
	struct builder b = {0};
	size_t fdes = 0;

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
			s.cfa = C_UNKNOWN; /* unknown from here on */
		if (loc < pc + range)
			push_row(&b, loc, &s, false, &c);
		push_row(&b, pc + range, &s, true, &c);
	}
	if (b.err || !b.n) {
		free(b.v);
		return b.err ? b.err : fdes ? 0 : -EINVAL;
	}
	out->fdes = fdes;
	return table(&b, out);
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
			     (r.cfa == LP_CFI_NONE && r.addr == ph.p_vaddr + ph.p_memsz))) {
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

const char *lp_unwind_why_key(unsigned why)
{
	static const char *const keys[LP_UF_NR] = {
		[LP_UW_WHY_NO_FDE] = "no_fde",
		[LP_UW_WHY_EXPR] = "cfa_expression",
		[LP_UW_WHY_RA] = "return_address_rule",
		[LP_UW_WHY_INSN] = "unreadable_cfi",
		[LP_UW_WHY_REG] = "cfa_register",
		[LP_UW_WHY_RANGE] = "offset_range",
		[LP_UF_RBP] = "rbp_lost",
		[LP_UF_READ] = "stack_unreadable",
		[LP_UF_OUTSIDE] = "outside_objects",
		[LP_UF_DEPTH] = "too_deep",
	};

	return why < LP_UF_NR ? keys[why] : "unknown";
}

void lp_cfi_free(struct lp_cfi *c)
{
	free(c->rows);
	memset(c, 0, sizeof(*c));
}
