// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Precise mode's graph nodes in the kernel (nodes.h). */
#include "engine/nodes.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core.skel.h"
#include "base/log.h"
#include "kernel/mapwalk.h"

void lp_nodes_fill(const struct lp_eproc *gp, bool on, struct lp_precise *pr)
{
	const struct lp_tensor_state *ts = &gp->tensors;

	memset(&pr->lay, 0, sizeof(pr->lay));
	pr->nodes_from_ns = gp->nodes_from_ns;
	if (ts->chosen >= 0 && !ts->refused)
		pr->lay = lp_tensor_candidate(ts->chosen);
	for (int i = 0; i < LP_MAX_OPS; i++) {
		pr->targs[i] = on && gp->op_readable[i] ? ts->targs[i] : LP_TA_NO;
		if (pr->targs[i] != LP_TA_NO && gp->op_readable[i] == LP_READ_MEMBER)
			pr->targs[i] |= LP_TA_THIS;
	}
}

static void log_decision(const struct lp_eproc *gp, pid_t pid)
{
	const struct lp_tensor_state *ts = &gp->tensors;
	struct lp_tensor_layout lay;
	char where[96];
	size_t read = 0, no = 0;

	for (size_t i = 0; i < gp->ops.n && i < LP_MAX_OPS; i++)
		if (gp->op_readable[i]) {
			read += ts->targs[i] == LP_TA_READ;
			no += ts->targs[i] == LP_TA_NO;
		}
	if (ts->refused) {
		log_warning("pid %d: its tensors are not read: %s", (int)pid, ts->why);
		return;
	}
	lay = lp_tensor_candidate(ts->chosen);
	lp_tensor_describe(&lay, where, sizeof(where));
	log_info("pid %d: tensors read on %zu op functions (ggml_tensor: %s; %d threads)%s%s",
		 (int)pid, read, where, ts->nth, no ? "; not on some: " : "", no ? ts->why : "");
}

/* Ticks the first decision waits for the ops called to settle: one that is called fewer
 * than LP_TSNIFF_N times in all would hold it for ever. */
#define TENSORS_MAX_WAITS 3

bool lp_nodes_check(struct lp_core *c, struct lp_target *t, bool fast)
{
	struct lp_eproc *gp = t->eng;
	int sfd = bpf_map__fd(c->skel->maps.tensor_sniff);
	int pfd = bpf_map__fd(c->skel->maps.precise);
	struct lp_tensor_sniff *s;
	struct lp_precise pr;
	__u32 key = (__u32)t->pid;
	bool changed = false, partial = false, whole = false, begins, full[LP_MAX_OPS] = {false};
	struct lp_op_samples *os;
	size_t seen = 0;

	if (!gp->precise_on || gp->tensors.refused)
		return false;
	s = malloc(sizeof(*s));
	if (!s)
		return false;
	for (size_t i = 0; i < gp->ops.n && i < LP_MAX_OPS; i++) {
		struct lp_op_key k = {.tgid = (__u32)t->pid, .op = (__u32)i};

		if (!gp->op_readable[i] || gp->tensors.targs[i] != LP_TA_UNKNOWN ||
		    gp->tensors.op_fits[i] || bpf_map_lookup_elem(sfd, &k, s) < 0)
			continue;
		full[i] = s->n >= LP_TSNIFF_N;
		for (int j = 0; j < LP_TSNIFF_N; j++)
			full[i] &= s->dst[j] != 0;
		partial |= !full[i];
		seen++;
	}
	/* Every op read begins at one tick, so that the per-token figures of all count from
	 * one token. A tick soon after the probes went on, within a token, has seen only the
	 * ops the token had computed by then: the first decision waits for a decode that began
	 * and returned since calls were first seen (the second to return: the first may have
	 * begun before), which called every op of the graph; or, for an engine whose decodes
	 * are not probed, a tick that finds the same ops called as the one before, each on
	 * LP_TSNIFF_N calls. */
	if (seen && !gp->tensors_seen && (os = lp_eproc_op_samples(c, gp, t->pid))) {
		gp->tensors_decodes0 = os->decodes;
		free(os);
	}
	if (gp->tensors.chosen < 0 && seen && !partial &&
	    (os = lp_eproc_op_samples(c, gp, t->pid))) {
		whole = gp->tensors_seen && os->decodes >= gp->tensors_decodes0 + 2;
		free(os);
	}
	/* Between the second's ticks (fast), only a whole decode decides. */
	if (gp->tensors.chosen < 0 && !whole && fast) {
		if (seen && !gp->tensors_seen)
			gp->tensors_seen = seen;
		free(s);
		return false;
	}
	if (gp->tensors.chosen < 0 && !whole && (partial || seen != gp->tensors_seen) &&
	    gp->tensors_waits++ < TENSORS_MAX_WAITS) {
		gp->tensors_seen = seen;
		free(s);
		return false;
	}
	for (size_t i = 0; i < gp->ops.n && i < LP_MAX_OPS; i++) {
		struct lp_op_key k = {.tgid = (__u32)t->pid, .op = (__u32)i};

		if (!full[i] || bpf_map_lookup_elem(sfd, &k, s) < 0)
			continue;
		changed |= lp_tensor_decide(&gp->tensors, (int)i, gp->op_readable[i], s);
		if (gp->tensors.targs[i] == LP_TA_NO)
			log_info("pid %d: op %s: tensors not read: %s", (int)t->pid,
				 gp->ops.v[i].name, gp->tensors.why);
		bpf_map_delete_elem(sfd, &k);
	}
	free(s);
	if (!changed || bpf_map_lookup_elem(pfd, &key, &pr) < 0)
		return false;
	begins = !gp->nodes_from_ns && gp->tensors.chosen >= 0 && !gp->tensors.refused;
	lp_nodes_fill(gp, true, &pr);
	if (bpf_map_update_elem(pfd, &key, &pr, BPF_EXIST) < 0)
		return false;
	/* Reading begins: the per-token figures count the generation decodes that begin after
	 * nodes_from_ns (bpf/precise.bpf.c whole_gen, bpf/decode.bpf.c whole_token), taken once
	 * the kernel reads every call: a decode begun between the two would count as a whole
	 * token with its first nodes unread. */
	if (begins) {
		gp->nodes_from_ns = pr.nodes_from_ns = lp_now_ns();
		if (bpf_map_update_elem(pfd, &key, &pr, BPF_EXIST) < 0)
			return false;
	}
	if (gp->tensors_logged || (gp->tensors.chosen < 0 && !gp->tensors.refused))
		return false;
	gp->tensors_logged = true;
	log_decision(gp, t->pid);
	return gp->tensors.chosen >= 0 && !gp->tensors.refused;
}

struct collect {
	__u32 tgid;
	struct lp_node *v;
	size_t n, cap;
	struct lp_keys *keys; /* or collect the keys to delete */
};

static int visit(void *ctx, const void *key, const void *value)
{
	const struct lp_node_key *k = key;
	struct collect *c = ctx;

	if (k->tgid != c->tgid)
		return 0;
	if (c->keys)
		return lp_keys_add(c->keys, key);
	if (c->n == c->cap) {
		size_t cap = c->cap ? 2 * c->cap : 64;
		struct lp_node *v = realloc(c->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		c->v = v;
		c->cap = cap;
	}
	c->v[c->n].key = *k;
	memcpy(&c->v[c->n].val, value, sizeof(c->v[c->n].val));
	c->n++;
	return 0;
}

struct lp_node *lp_nodes_read(const struct lp_core *c, const struct lp_target *t, size_t *n)
{
	const struct lp_eproc *gp = t->eng;
	struct collect col = {.tgid = (__u32)t->pid};
	struct lp_node *v;

	*n = 0;
	if (!gp)
		return NULL;
	/* Only processes whose tensors were read have nodes: no walk for the others. */
	if (gp->tensors.chosen < 0)
		return NULL;
	if (gp->final_nodes) {
		v = malloc(gp->nfinal_nodes * sizeof(*v));
		if (!v)
			return NULL;
		memcpy(v, gp->final_nodes, gp->nfinal_nodes * sizeof(*v));
		*n = gp->nfinal_nodes;
		return v;
	}
	if (lp_map_walk(bpf_map__fd(c->skel->maps.nodes), sizeof(struct lp_node_key),
			sizeof(struct lp_node_val), visit, &col) != 0) {
		free(col.v);
		return NULL;
	}
	*n = col.n;
	return col.v;
}

void lp_nodes_take(struct lp_core *c, struct lp_target *t, bool keep)
{
	struct lp_eproc *gp = t->eng;
	struct lp_keys keys = {.size = sizeof(struct lp_node_key)};
	struct collect col = {.tgid = (__u32)t->pid, .keys = &keys};
	int fd = bpf_map__fd(c->skel->maps.nodes);

	if (!gp)
		return;
	if (keep && !gp->final_nodes) {
		size_t n;
		struct lp_node *v = lp_nodes_read(c, t, &n);

		gp->final_nodes = v ? v : calloc(1, sizeof(*v));
		gp->nfinal_nodes = v ? n : 0;
	}
	/* No node was made where no layout was chosen. */
	if (gp->tensors.chosen >= 0 &&
	    lp_map_walk(fd, sizeof(struct lp_node_key), 0, visit, &col) == 0)
		lp_map_delete(fd, &keys);
	else
		free(keys.v);
	for (size_t i = 0; i < gp->ops.n && i < LP_MAX_OPS; i++) {
		struct lp_op_key k = {.tgid = (__u32)t->pid, .op = (__u32)i};

		if (gp->op_readable[i])
			bpf_map_delete_elem(bpf_map__fd(c->skel->maps.tensor_sniff), &k);
	}
}
