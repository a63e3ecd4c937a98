/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Folded stacks (the daemon's /debug/pprof/folded, each stack rooted at its process's comm
 * and its op group) read into a tree, and drawn: as a flame graph in SVG (frames coloured
 * by op group, a legend, click to zoom, search), and as the hottest functions in text, as
 * `pprof -top` lists them, with each one's op group. Pure: unit-tested on made-up lines. */
#ifndef LLMPROFCTL_FLAME_H
#define LLMPROFCTL_FLAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define FLAME_GROUPS 16

struct flame_node {
	char *name;
	uint64_t total; /* samples in it and below */
	uint64_t self;
	uint64_t by_group[FLAME_GROUPS];   /* of total */
	uint64_t self_group[FLAME_GROUPS]; /* of self */
	struct flame_node **kids;
	size_t nkids;
};

struct flame {
	struct flame_node root;
	char *groups[FLAME_GROUPS]; /* the op groups met, in the order met */
	size_t ngroups;
	uint64_t lines;
};

/* Adds folded text (lines "comm;group;root;...;leaf count"): with keep_group the group stays
 * the stack's second frame, else it is taken out and only colours. 0, or -EINVAL naming the
 * first bad line's number in *bad_line, -ENOMEM. */
int flame_parse(struct flame *f, const char *text, size_t len, bool keep_group, size_t *bad_line);
void flame_free(struct flame *f);

/* The group that most of a node's samples are in, or NULL without any. */
const char *flame_group(const struct flame *f, const struct flame_node *n);

struct flame_svg {
	const char *title;    /* the top line */
	const char *subtitle; /* under it */
	unsigned width;	      /* pixels; 0: 1200 */
};

/* The flame graph as an SVG document with its script. 0 or -errno of the write. */
int flame_write_svg(const struct flame *f, const struct flame_svg *o, FILE *out);

/* The n functions with the most samples of their own, as pprof -top: flat, flat%, sum%,
 * cum, cum%, op group, name. */
void flame_write_top(const struct flame *f, size_t n, FILE *out);

#endif
