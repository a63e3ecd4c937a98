// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* The torch engine (Hugging Face transformers' generate(), vLLM's CPU backend,
 * TorchServe: PyTorch's CPU stack): a process mapping libtorch is a candidate, found once
 * it runs a forward (its token embedding, bpf/torch.bpf.c); its ops are the aten ops on
 * its threads' stacks, named by libtorch's at::_ops entry points (aten.h) through an op
 * functions' table the sampler walks to; an OpenMP worker's op is the one its region's
 * master was in (found from the worker's thread data with GCC's runtime, else by the
 * runtime's region entries, probed for each torch process). */
#include <bpf/libbpf.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.skel.h"
#include "engine/aten.h"
#include "engine/engine.h"

static const char *const aten_syms[] = {"_ZN2at4_ops*4callE*", "_ZN2at4_ops*10redispatchE*", NULL};
/* at::_ops::embedding::call(weight, indices, padding_idx, scale_grad_by_freq, sparse) */
static const char *const forward_syms[] = {"_ZN2at4_ops9embedding4callE*", NULL};
static const char *const fork_syms[] = {"GOMP_parallel", "__kmpc_fork_call", NULL};
/* GEMM entry points (reference BLAS, OpenBLAS and MKL export them), and a symbol each of
 * OpenBLAS, MKL and BLIS has that the others do not: a process's BLAS (findings). */
static const char *const blas_syms[] = {"sgemm_",
					"dgemm_",
					"cblas_sgemm",
					"openblas_get_config",
					"MKL_Get_Version",
					"mkl_serv_intel_cpu_true",
					"bli_info_get_version_str",
					NULL};

static uint32_t torch_verdict(const struct lp_obj *o)
{
	return lp_obj_has(o, LP_SYM_FORWARD) ? LP_OBJ_CANDIDATE : LP_OBJ_NONE;
}

/* Its ops are the op functions' table's; the sampling table holds the barriers and
 * OpenMP runtimes (engine.c) only. */
static int torch_sym_entry(const struct lp_elf_sym *sym, uint8_t *kind, char *op, size_t size,
			   enum lp_op_group *group)
{
	(void)op;
	(void)size;
	(void)group;
	if (sym->cls != LP_SYM_BARRIER)
		return -ENOENT;
	*kind = LP_K_BARRIER;
	return 0;
}

/* The token embedding's entry, for every process that maps the file: where the arguments
 * are as at the call (it reads both tensors). */
static int torch_attach_step(struct lp_engines *g, pid_t pid, struct lp_obj *o, const char *path)
{
	int r = 0;

	(void)pid;
	for (size_t i = 0; i < o->syms.nsyms && r == 0; i++) {
		const struct lp_elf_sym *sym = &o->syms.syms[i];
		struct bpf_link *l;

		if (sym->cls != LP_SYM_FORWARD)
			continue;
		l = bpf_program__attach_uprobe(g->core->skel->progs.lp_torch_forward, false, -1,
					       path, lp_uprobe_offset_args(sym));
		r = l ? lp_links_push(&o->step.links, &o->step.nlinks, l) : -errno;
		o->step.n += l != NULL;
	}
	if (r < 0)
		log_warning_errno(r,
				  "attach the token embedding's probe in %s: %m; torch processes "
				  "mapping it will not be found, nor their tokens counted",
				  o->path);
	return r;
}

/* Its OpenMP runtime's region entry and return, for this process only: a worker's sample
 * gets the op its master was in (where.bpf.h). Not GCC's runtime's: a worker's own thread
 * data leads to its master's frames (where.bpf.h's team path), with no probe on every
 * region (a trap each, 4.7 us and more on hosts that unmap the kernel from user space:
 * bench/RESULTS.md). */
static int torch_proc_probes(struct lp_engines *g, pid_t pid, const struct lp_eproc *gp,
			     struct lp_probe_site **v, size_t *n)
{
	struct core_bpf *s = g->core->skel;
	struct lp_probe_site *nv;
	int r = 0;

	*v = NULL;
	*n = 0;
	for (size_t i = 0; i < gp->nobjs && r == 0; i++) {
		const struct lp_obj *o = gp->objs[i];
		char path[PATH_MAX + 64];

		if (!lp_obj_has(o, LP_SYM_FORK) || lp_obj_team_path(g, o))
			continue;
		if ((r = lp_uprobe_path(pid, o->path, o->dev, o->ino, path, sizeof(path))) < 0)
			break;
		for (size_t k = 0; k < o->syms.nsyms; k++) {
			const struct lp_elf_sym *sym = &o->syms.syms[k];

			if (sym->cls != LP_SYM_FORK)
				continue;
			if (!(nv = realloc(*v, (*n + 2) * sizeof(*nv)))) {
				r = -ENOMEM;
				break;
			}
			*v = nv;
			for (int ret = 0; ret < 2; ret++) {
				nv[*n] = (struct lp_probe_site){
					.prog = ret ? s->progs.lp_omp_fork_exit
						    : s->progs.lp_omp_fork_enter,
					.ret = ret,
					.off = lp_uprobe_offset_args(sym)};
				snprintf(nv[*n].path, sizeof(nv[*n].path), "%s", path);
				(*n)++;
			}
		}
	}
	return r;
}

static void torch_describe_found(const struct lp_engines *g, const struct lp_target *t,
				 struct lp_line *l)
{
	const struct lp_eproc *gp = t->eng;
	const char *runtime = "none", *lib = NULL;
	size_t nops = 0;

	(void)g;
	for (size_t i = 0; i < gp->nobjs; i++) {
		const struct lp_obj *o = gp->objs[i];

		if (o->nop_names) {
			lib = o->path;
			nops += o->nop_names;
		}
		if (o->omp_runtime)
			runtime = o->path;
	}
	lp_line_add(l, "its first forward ran; %zu aten ops in %s; OpenMP runtime %s", nops,
		    lib ? lib : "(no op functions: its ops are unknown)", runtime);
}

static int by_off(const void *a, const void *b)
{
	const struct lp_opfn_row *x = a, *y = b;

	return x->off < y->off ? -1 : x->off > y->off;
}

/* The op's id in o (1-based), added if new. */
static int name_id(struct lp_obj *o, const char *op, size_t *cap)
{
	for (size_t i = o->nop_names; i > 0; i--)
		if (!strcmp(o->op_names[i - 1], op))
			return (int)i;
	if (o->nop_names == *cap) {
		size_t n = *cap ? *cap * 2 : 256;
		char **v = realloc(o->op_names, n * sizeof(*v));
		uint8_t *gv;

		if (!v)
			return -ENOMEM;
		o->op_names = v;
		if (!(gv = realloc(o->op_groups, n)))
			return -ENOMEM;
		o->op_groups = gv;
		*cap = n;
	}
	if (!(o->op_names[o->nop_names] = strdup(op)))
		return -ENOMEM;
	o->op_groups[o->nop_names] = (uint8_t)lp_aten_group(op);
	return (int)++o->nop_names;
}

/* libtorch's at::_ops entry points, named by its schema strings: a row at each function's
 * start, a gap row at its end where no function follows at once. */
static int torch_op_functions(int fd, struct lp_obj *o, struct lp_opfn_row **rows, size_t *n)
{
	struct lp_aten_names names;
	struct lp_opfn_row *v = NULL;
	size_t nv = 0, k = 0, cap = 0, size = 0;
	char *rodata = NULL, op[LP_OP_NAME_MAX];
	int r;

	*rows = NULL;
	*n = 0;
	if (!lp_obj_has(o, LP_SYM_ATEN))
		return -ENOENT;
	/* Its schemas; without them ops are named by their structs (softmax_int). */
	r = lp_elf_section(fd, ".rodata", 256u << 20, &rodata, &size);
	if (r < 0 && r != -ENOENT)
		return r;
	r = lp_aten_names_read(rodata, size, &names);
	free(rodata);
	if (r < 0)
		return r;
	if (!(v = calloc(2 * o->syms.nsyms, sizeof(*v))) ||
	    !(o->sym_op = calloc(o->syms.nsyms, sizeof(*o->sym_op)))) {
		free(v);
		lp_aten_names_free(&names);
		return -ENOMEM;
	}
	for (size_t i = 0; i < o->syms.nsyms; i++) {
		const struct lp_elf_sym *sym = &o->syms.syms[i];
		int id;

		if ((sym->cls != LP_SYM_ATEN && sym->cls != LP_SYM_FORWARD) || !sym->size ||
		    sym->file_off > UINT32_MAX || lp_aten_op(&names, sym->name, op, sizeof(op)) < 0)
			continue;
		if ((id = name_id(o, op, &cap)) < 0 || id > UINT16_MAX) {
			r = id < 0 ? id : -E2BIG;
			break;
		}
		o->sym_op[i] = (uint16_t)id;
		v[nv++] = (struct lp_opfn_row){.off = (uint32_t)sym->file_off,
					       .name = (uint16_t)id,
					       .group = o->op_groups[id - 1]};
		v[nv++] = (struct lp_opfn_row){.off = (uint32_t)(sym->file_off + sym->size)};
	}
	lp_aten_names_free(&names);
	if (r < 0) {
		free(v);
		return r;
	}
	qsort(v, nv, sizeof(*v), by_off);
	/* A function's start where another's end is: the start; the same offset twice
	 * (aliases): the first. */
	for (size_t i = 0; i < nv; i++) {
		if (k && v[k - 1].off == v[i].off) {
			if (!v[k - 1].name)
				v[k - 1] = v[i];
			continue;
		}
		v[k++] = v[i];
	}
	if (!k) {
		free(v);
		return -ENOENT;
	}
	*rows = v;
	*n = k;
	return 0;
}

const struct lp_engine lp_engine_torch = {
	.id = LP_ENGINE_TORCH,
	.patterns = {[LP_SYM_ATEN] = aten_syms,
		     [LP_SYM_FORWARD] = forward_syms,
		     [LP_SYM_FORK] = fork_syms,
		     [LP_SYM_BLAS] = blas_syms},
	.verdict = torch_verdict,
	.sym_entry = torch_sym_entry,
	.step_class = LP_SYM_FORWARD,
	.attach_step = torch_attach_step,
	.describe_found = torch_describe_found,
	.op_functions = torch_op_functions,
	.proc_probes = torch_proc_probes,
	.region_ops = true,
};
