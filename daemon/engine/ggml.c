// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* The ggml engine (llama.cpp and its forks, node-llama-cpp, llama-cpp-python, ollama): a
 * process is ggml's as soon as it maps a matmul function; its ops are the functions ggml's
 * CPU backend names ggml_compute_forward_<op> (ops.c); its step is llama_decode, probed
 * always (bpf/decode.bpf.c). */
#include <bpf/libbpf.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "core.skel.h"
#include "engine/engine.h"

static uint32_t ggml_verdict(const struct lp_obj *o)
{
	if (lp_obj_has(o, LP_SYM_MATMUL))
		return LP_OBJ_MATMUL;
	return LP_OBJ_NONE;
}

static int ggml_sym_entry(const struct lp_elf_sym *sym, uint8_t *kind, char *op, size_t size,
			  enum lp_op_group *group)
{
	if (sym->cls == LP_SYM_BARRIER) {
		*kind = LP_K_BARRIER;
		return 0;
	}
	if (lp_op_name(sym->name, op, size) == 0) {
		*kind = LP_K_OP;
		*group = lp_op_group_of(op);
		return 0;
	}
	if (sym->cls != LP_SYM_MATMUL)
		return -ENOENT;
	/* A matmul kernel by configuration: matmul whatever its name says, named as the op
	 * with only characters a C++ symbol has, the rest as '?'. */
	*kind = LP_K_KERNEL;
	*group = LP_G_MATMUL;
	snprintf(op, size, "%s", sym->name);
	for (char *c = op; *c; c++)
		if (!isalnum((unsigned char)*c) && !strchr("_.:<>,()~ ", *c))
			*c = '?';
	return 0;
}

/* llama_decode's entry and return, for every process that maps the file (path: as pid
 * reaches it); the batch's reader first, where the kernel loaded it (bpf_loop). */
static int ggml_attach_step(struct lp_engines *g, pid_t pid, struct lp_obj *o, const char *path)
{
	struct core_bpf *s = g->core->skel;
	int r = 0;

	(void)pid;
	for (size_t i = 0; i < o->syms.nsyms && r == 0; i++) {
		const struct lp_elf_sym *sym = &o->syms.syms[i];

		if (sym->cls != LP_SYM_DECODE)
			continue;
		for (int k = bpf_program__fd(s->progs.lp_decode_batch) < 0; k < 3 && r == 0; k++) {
			static const bool ret_of[] = {false, false, true};
			struct bpf_program *p = k == 0	 ? s->progs.lp_decode_batch
						: k == 1 ? s->progs.lp_decode_enter
							 : s->progs.lp_decode_exit;
			struct bpf_link *l = bpf_program__attach_uprobe(p, ret_of[k], -1, path,
									lp_uprobe_offset(sym));

			r = l ? lp_links_push(&o->step.links, &o->step.nlinks, l) : -errno;
			o->step.n += l != NULL;
		}
	}
	if (r < 0)
		log_warning_errno(r,
				  "attach llama_decode probes in %s: %m; tokens will not be "
				  "counted for it",
				  o->path);
	return r;
}

static void ggml_describe_found(const struct lp_engines *g, const struct lp_target *t,
				struct lp_line *l)
{
	const struct lp_eproc *gp = t->eng;
	struct lp_line found = {.len = 0}, missing = {.len = 0};

	for (size_t i = 0; i < gp->nobjs; i++)
		if (lp_obj_has(gp->objs[i], LP_SYM_MATMUL))
			lp_line_add(&found, "%s%s", found.len ? ", " : "", gp->objs[i]->path);
	for (int c = 0; c < LP_SYM_CONFIG_NR; c++)
		for (const char *const *p = g->cfg->symbols[c]; p && *p; p++)
			if (!lp_eproc_has(gp, *p))
				lp_line_add(&missing, "%s%s", missing.len ? ", " : "", *p);
	lp_line_add(l,
		    "matmul in %s; %zu functions in the sampling table; not found (stripped, "
		    "inlined or not in this build): %s",
		    found.buf, gp->nranges, missing.len ? missing.buf : "none");
}

const struct lp_engine lp_engine_ggml = {
	.id = LP_ENGINE_GGML,
	.verdict = ggml_verdict,
	.sym_entry = ggml_sym_entry,
	.step_class = LP_SYM_DECODE,
	.attach_step = ggml_attach_step,
	.describe_found = ggml_describe_found,
};
