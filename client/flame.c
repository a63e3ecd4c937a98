// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Folded stacks into a tree, drawn as SVG and as text (flame.h). */
#include "flame.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static int group_index(struct flame *f, const char *name, size_t len)
{
	for (size_t i = 0; i < f->ngroups; i++)
		if (strlen(f->groups[i]) == len && !strncmp(f->groups[i], name, len))
			return (int)i;
	if (f->ngroups == FLAME_GROUPS)
		return FLAME_GROUPS - 1; /* the last one stands for the rest */
	if (!(f->groups[f->ngroups] = strndup(name, len)))
		return -ENOMEM;
	return (int)f->ngroups++;
}

static struct flame_node *child(struct flame_node *n, const char *name, size_t len)
{
	struct flame_node *k, **v;

	for (size_t i = 0; i < n->nkids; i++)
		if (strlen(n->kids[i]->name) == len && !strncmp(n->kids[i]->name, name, len))
			return n->kids[i];
	k = calloc(1, sizeof(*k));
	v = realloc(n->kids, (n->nkids + 1) * sizeof(*v));
	if (v)
		n->kids = v;
	if (!k || !v || !(k->name = strndup(name, len))) {
		free(k);
		return NULL;
	}
	n->kids[n->nkids++] = k;
	return k;
}

int flame_parse(struct flame *f, const char *text, size_t len, bool keep_group, size_t *bad_line)
{
	const char *p = text, *end = text + len;
	size_t line = 0;

	if (!f->root.name && !(f->root.name = strdup("all")))
		return -ENOMEM;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p)), *sp, *q;
		const char *e = nl ? nl : end;
		struct flame_node *n = &f->root;
		unsigned long long count;
		char num[24], *stop;
		int g = -1, frame = 0;

		line++;
		if (e == p) {
			p = e + 1;
			continue;
		}
		for (sp = e; sp > p && sp[-1] != ' '; sp--)
			;
		if (sp == p || (size_t)(e - sp) >= sizeof(num) || e == sp)
			goto bad;
		memcpy(num, sp, (size_t)(e - sp));
		num[e - sp] = '\0';
		count = strtoull(num, &stop, 10);
		if (*stop || stop == num)
			goto bad;
		sp--; /* the space */
		/* the group: the second frame */
		q = memchr(p, ';', (size_t)(sp - p));
		if (q) {
			const char *g0 = q + 1, *g1 = memchr(g0, ';', (size_t)(sp - g0));

			if (!g1)
				g1 = sp;
			if ((g = group_index(f, g0, (size_t)(g1 - g0))) < 0)
				return g;
		}
		n->total += count;
		if (g >= 0)
			n->by_group[g] += count;
		for (const char *s = p; s < sp; frame++) {
			const char *t = memchr(s, ';', (size_t)(sp - s));

			if (!t)
				t = sp;
			if (frame != 1 || keep_group || g < 0) {
				if (!(n = child(n, s, (size_t)(t - s))))
					return -ENOMEM;
				n->total += count;
				if (g >= 0)
					n->by_group[g] += count;
			}
			s = t + 1;
		}
		n->self += count;
		if (g >= 0)
			n->self_group[g] += count;
		f->lines++;
		p = nl ? nl + 1 : end;
		continue;
	bad:
		if (bad_line)
			*bad_line = line;
		return -EINVAL;
	}
	return 0;
}

static void node_free(struct flame_node *n)
{
	for (size_t i = 0; i < n->nkids; i++) {
		node_free(n->kids[i]);
		free(n->kids[i]);
	}
	free(n->kids);
	free(n->name);
}

void flame_free(struct flame *f)
{
	node_free(&f->root);
	for (size_t i = 0; i < f->ngroups; i++)
		free(f->groups[i]);
	memset(f, 0, sizeof(*f));
}

const char *flame_group(const struct flame *f, const struct flame_node *n)
{
	size_t best = 0;

	for (size_t i = 1; i < f->ngroups; i++)
		if (n->by_group[i] > n->by_group[best])
			best = i;
	return f->ngroups && n->by_group[best] ? f->groups[best] : NULL;
}

/* ---- SVG ---- */

/* The op groups' colours: the engine's heavy work warm, sync grey, the rest cool. */
static const struct {
	const char *group, *color;
} palette[] = {
	{"matmul", "#e8593c"},	  {"attention", "#f39c34"},   {"norm", "#e8c23a"},
	{"rope", "#9cc94a"},	  {"elementwise", "#4bb6a4"}, {"copy", "#4a8fd8"},
	{"other_ops", "#9b6fd1"}, {"sync", "#a6a6a6"},	      {"outside_ops", "#d9b38c"},
};

static const char *color_of(const char *group)
{
	if (!group)
		return "#dddddd";
	for (size_t i = 0; i < sizeof(palette) / sizeof(palette[0]); i++)
		if (!strcmp(palette[i].group, group))
			return palette[i].color;
	return "#c8a2c8";
}

static void xml(FILE *out, const char *s)
{
	for (; *s; s++) {
		switch (*s) {
		case '&':
			fputs("&amp;", out);
			break;
		case '<':
			fputs("&lt;", out);
			break;
		case '>':
			fputs("&gt;", out);
			break;
		case '"':
			fputs("&quot;", out);
			break;
		case '\'':
			fputs("&#39;", out);
			break;
		default:
			fputc(*s, out);
		}
	}
}

static unsigned depth_of(const struct flame_node *n)
{
	unsigned d = 0;

	for (size_t i = 0; i < n->nkids; i++) {
		unsigned k = depth_of(n->kids[i]);

		if (k > d)
			d = k;
	}
	return d + 1;
}

#define FRAME_H 16
#define MARGIN 10
#define TOP 64

struct draw {
	const struct flame *f;
	FILE *out;
	double px;   /* pixels a sample */
	unsigned y0; /* the root's row */
};

static void frame(const struct draw *d, const struct flame_node *n, uint64_t x, unsigned depth)
{
	double w = (double)n->total * d->px;
	const char *g = flame_group(d->f, n);
	uint64_t at = x;

	if (w < 0.1)
		return; /* too narrow to see; its samples stay in its parent's width */
	fprintf(d->out, "<g class=\"f\" data-x=\"%llu\" data-n=\"%llu\" data-d=\"%u\" data-g=\"",
		(unsigned long long)x, (unsigned long long)n->total, depth);
	xml(d->out, g ? g : "");
	fputs("\"><title>", d->out);
	xml(d->out, n->name);
	fprintf(d->out, " (%llu samples, %.2f%%%s%s)</title>", (unsigned long long)n->total,
		d->f->root.total ? 100.0 * (double)n->total / (double)d->f->root.total : 0,
		g ? ", " : "", g ? g : "");
	fprintf(d->out,
		"<rect x=\"%.3f\" y=\"%u\" width=\"%.3f\" height=\"%d\" fill=\"%s\" rx=\"2\"/>"
		"<text x=\"%.3f\" y=\"%u\"></text><desc>",
		MARGIN + (double)x * d->px, d->y0 - depth * FRAME_H, w, FRAME_H - 1, color_of(g),
		MARGIN + (double)x * d->px + 3, d->y0 - depth * FRAME_H + 11);
	xml(d->out, n->name);
	fputs("</desc></g>\n", d->out);
	for (size_t i = 0; i < n->nkids; i++) {
		frame(d, n->kids[i], at, depth + 1);
		at += n->kids[i]->total;
	}
}

/* Click a frame to zoom to it (its ancestors keep the whole width), click the root to
 * reset; Search highlights the frames whose name matches and says their share. */
static const char script[] =
	"<script type=\"text/ecmascript\"><![CDATA[\n"
	"var W, frames, total, px;\n"
	"function fit(g) { var r = g.querySelector('rect'), t = g.querySelector('text'),\n"
	"  name = g.querySelector('desc').textContent, w = +r.getAttribute('width'),\n"
	"  n = Math.floor((w - 6) / 7);\n"
	"  t.textContent = n < 3 ? '' : name.length <= n ? name : name.slice(0, n - 2) + '..'; }\n"
	"function init() { var svg = document.documentElement;\n"
	"  W = +svg.getAttribute('width') - 2 * 10; frames = document.querySelectorAll('g.f');\n"
	"  total = +frames[0].getAttribute('data-n'); px = W / total;\n"
	"  frames.forEach(function (g) { fit(g); g.addEventListener('click', function () { "
	"zoom(g); }); });\n"
	"  document.getElementById('search').addEventListener('click', search);\n"
	"  document.getElementById('reset').addEventListener('click', function () { "
	"zoom(frames[0]); }); }\n"
	"function zoom(z) { var zx = +z.getAttribute('data-x'), zn = +z.getAttribute('data-n'),\n"
	"  zd = +z.getAttribute('data-d'), s = W / zn;\n"
	"  frames.forEach(function (g) { var x = +g.getAttribute('data-x'), n = "
	"+g.getAttribute('data-n'),\n"
	"    d = +g.getAttribute('data-d'), r = g.querySelector('rect'), t = "
	"g.querySelector('text');\n"
	"    var inside = x >= zx && x + n <= zx + zn, below = d < zd && x <= zx && x + n >= zx + "
	"zn;\n"
	"    g.style.display = inside || below ? '' : 'none';\n"
	"    if (below) { r.setAttribute('x', 10); r.setAttribute('width', W); }\n"
	"    else if (inside) { r.setAttribute('x', 10 + (x - zx) * s); r.setAttribute('width', n "
	"* s); }\n"
	"    t.setAttribute('x', +r.getAttribute('x') + 3); fit(g); }); }\n"
	"function search() { var re = prompt('Search for (a regular expression)'); if (re === "
	"null) return;\n"
	"  var rx = new RegExp(re), hit = 0, seen = [];\n"
	"  frames.forEach(function (g) { var r = g.querySelector('rect'),\n"
	"    m = re !== '' && rx.test(g.querySelector('desc').textContent);\n"
	"    if (!r.hasAttribute('data-c')) r.setAttribute('data-c', r.getAttribute('fill'));\n"
	"    r.setAttribute('fill', m ? '#e040e0' : r.getAttribute('data-c'));\n"
	"    if (m) { var x = +g.getAttribute('data-x'), n = +g.getAttribute('data-n');\n"
	"      if (!seen.some(function (s) { return x >= s[0] && x + n <= s[0] + s[1]; })) {\n"
	"        seen.push([x, n]); hit += n; } } });\n"
	"  document.getElementById('matched').textContent = re === '' ? '' :\n"
	"    'Matched: ' + (100 * hit / total).toFixed(1) + '%'; }\n"
	"window.addEventListener('load', init);\n"
	"]]></script>\n";

int flame_write_svg(const struct flame *f, const struct flame_svg *o, FILE *out)
{
	unsigned width = o->width ? o->width : 1200, depth = depth_of(&f->root);
	unsigned legend = 24, height = TOP + depth * FRAME_H + legend + MARGIN;
	struct draw d = {.f = f,
			 .out = out,
			 .px = f->root.total ? (double)(width - 2 * MARGIN) / (double)f->root.total
					     : 0,
			 .y0 = TOP + (depth - 1) * FRAME_H};
	unsigned lx = MARGIN;

	fprintf(out,
		"<?xml version=\"1.0\" standalone=\"no\"?>\n"
		"<svg version=\"1.1\" width=\"%u\" height=\"%u\" viewBox=\"0 0 %u %u\" "
		"xmlns=\"http://www.w3.org/2000/svg\">\n"
		"<style>text { font-family: monospace; font-size: 12px; fill: #000; "
		"pointer-events: none; } g.f:hover rect { stroke: #000; stroke-width: 0.5; } "
		"g.f { cursor: pointer; } .b { cursor: pointer; fill: #336; } "
		"#title { font-size: 16px; }</style>\n"
		"<rect width=\"100%%\" height=\"100%%\" fill=\"#fafaf4\"/>\n",
		width, height, width, height);
	fputs(script, out);
	fprintf(out, "<text id=\"title\" x=\"%u\" y=\"22\">", MARGIN);
	xml(out, o->title ? o->title : "");
	fprintf(out, "</text>\n<text x=\"%u\" y=\"40\">", MARGIN);
	xml(out, o->subtitle ? o->subtitle : "");
	fprintf(out,
		"</text>\n<text id=\"reset\" class=\"b\" x=\"%u\" y=\"56\">Reset zoom</text>"
		"<text id=\"search\" class=\"b\" x=\"%u\" y=\"56\">Search</text>"
		"<text id=\"matched\" x=\"%u\" y=\"56\"></text>\n",
		MARGIN, width - 80, width - 260);
	frame(&d, &f->root, 0, 0);
	/* The legend: each op group met, with its share of the samples. */
	for (size_t i = 0; i < f->ngroups; i++) {
		fprintf(out, "<rect x=\"%u\" y=\"%u\" width=\"12\" height=\"12\" fill=\"%s\"/>", lx,
			height - legend, color_of(f->groups[i]));
		fprintf(out, "<text x=\"%u\" y=\"%u\">", lx + 16, height - legend + 10);
		xml(out, f->groups[i]);
		fprintf(out, " %.1f%%</text>\n",
			f->root.total ? 100.0 * (double)f->root.by_group[i] / (double)f->root.total
				      : 0);
		lx += 16 + 8 * (unsigned)(strlen(f->groups[i]) + 7);
	}
	fputs("</svg>\n", out);
	return ferror(out) ? -EIO : 0;
}

/* ---- top ---- */

struct fn_row {
	const char *name;
	uint64_t flat, cum;
	uint64_t by_group[FLAME_GROUPS];
};

struct top {
	struct fn_row *v;
	size_t n;
	const char **path; /* the names on the way down, for cum counted once a stack */
	size_t depth;
};

static struct fn_row *row_of(struct top *t, const char *name)
{
	struct fn_row *v;

	for (size_t i = 0; i < t->n; i++)
		if (!strcmp(t->v[i].name, name))
			return &t->v[i];
	if (!(v = realloc(t->v, (t->n + 1) * sizeof(*v))))
		return NULL;
	t->v = v;
	memset(&v[t->n], 0, sizeof(v[0]));
	v[t->n].name = name;
	return &v[t->n++];
}

/* Each node's own samples are its stacks' leaves; cum counts a function once on each way
 * down (recursion), as pprof does. */
static void walk(const struct flame *f, struct top *t, const struct flame_node *n, unsigned depth)
{
	struct fn_row *r;
	bool above = false;

	if (depth >= 2) { /* below the root and the comm */
		for (size_t i = 0; i < t->depth && !above; i++)
			above = !strcmp(t->path[i], n->name);
		if ((r = row_of(t, n->name))) {
			r->flat += n->self;
			if (!above)
				r->cum += n->total;
			for (size_t g = 0; g < f->ngroups; g++)
				r->by_group[g] += n->self ? n->self_group[g] : 0;
		}
	}
	if (depth >= 2)
		t->path[t->depth++] = n->name;
	for (size_t i = 0; i < n->nkids; i++)
		walk(f, t, n->kids[i], depth + 1);
	if (depth >= 2)
		t->depth--;
}

static int by_flat(const void *a, const void *b)
{
	const struct fn_row *x = a, *y = b;

	if (x->flat != y->flat)
		return x->flat < y->flat ? 1 : -1;
	return x->cum < y->cum ? 1 : x->cum > y->cum ? -1 : strcmp(x->name, y->name);
}

void flame_write_top(const struct flame *f, size_t n, FILE *out)
{
	struct top t = {.path = calloc(depth_of(&f->root) + 1, sizeof(char *))};
	double total = (double)f->root.total, sum = 0;

	if (!t.path)
		return;
	walk(f, &t, &f->root, 0);
	qsort(t.v, t.n, sizeof(*t.v), by_flat);
	fprintf(out, "%10s %6s %6s %10s %6s  %-12s %s\n", "flat", "flat%", "sum%", "cum", "cum%",
		"group", "function");
	for (size_t i = 0; i < t.n && i < n; i++) {
		const struct fn_row *r = &t.v[i];
		size_t best = 0;

		for (size_t g = 1; g < f->ngroups; g++)
			if (r->by_group[g] > r->by_group[best])
				best = g;
		sum += (double)r->flat;
		fprintf(out, "%10llu %5.1f%% %5.1f%% %10llu %5.1f%%  %-12s %s\n",
			(unsigned long long)r->flat, total ? 100 * (double)r->flat / total : 0,
			total ? 100 * sum / total : 0, (unsigned long long)r->cum,
			total ? 100 * (double)r->cum / total : 0,
			f->ngroups && r->by_group[best] ? f->groups[best] : "-", r->name);
	}
	free(t.v);
	free(t.path);
}
