// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "engine/python.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "core.skel.h"
#include "base/log.h"
#include "base/config.h"
#include "llmprof/abi.h"
#include "formats/pycode.h"
#include "kernel/mapwalk.h"

/* What 3.13 states of itself (_Py_DebugOffsets, 8-byte words from _PyRuntime's start),
 * against its entry below: not free-threaded, then each offset the walk and the naming
 * read. */
static const struct lp_py_debug_word debug_313[] = {
	{2, 0},	      /* free_threaded */
	{5, 0x278},   /* runtime_state.interpreters_head */
	{9, 0x1cb0},  /* interpreter_state.threads_head */
	{15, 0x1e48}, /* interpreter_state.gil_runtime_state (_gil: gil_lo) */
	{21, 0x08},   /* thread_state.next */
	{23, 0x48},   /* thread_state.current_frame */
	{25, 0xa0},   /* thread_state.native_thread_id */
	{29, 0x08},   /* interpreter_frame.previous */
	{30, 0x00},   /* interpreter_frame.executable */
	{31, 0x38},   /* interpreter_frame.instr_ptr */
	{33, 0x46},   /* interpreter_frame.owner */
	{35, 0x70},   /* code_object.filename */
	{37, 0x80},   /* code_object.qualname */
	{38, 0x88},   /* code_object.linetable */
	{39, 0x44},   /* code_object.firstlineno */
	{43, 0xc8},   /* code_object.co_code_adaptive */
	{65, 0x10},   /* bytes_object.ob_size */
	{66, 0x20},   /* bytes_object.ob_sval */
	{68, 0x20},   /* unicode_object.state */
	{69, 0x10},   /* unicode_object.length */
	{70, 0x28},   /* unicode_object.asciiobject_size */
};

/* One entry per minor version, each checked on x86-64 against that version's own headers
 * (offsetof, Py_BUILD_CORE) and against a running interpreter whose stacks an outside walk
 * read as the interpreter's own traceback did (Debian 12's 3.11.2, pyenv's 3.11.7, 3.12.1
 * and 3.13.0). A version without an entry is said, and its processes' stacks keep their
 * native frames: structures are never guessed at. The GIL is the main interpreter's (3.12
 * on, each interpreter may have its own: the main one always does). */
static const struct lp_py_layout layouts[] = {
	{
		.version = 0x030b,	/* 3.11 */
		.interp_head = 0x28,	/* _PyRuntimeState.interpreters.head */
		.interp_threads = 0x10, /* PyInterpreterState.threads.head */
		.ts_next = 0x08,
		.ts_native_tid = 0xa0,
		.ts_frame = 0x38, /* PyThreadState.cframe */
		.cframe_current = 0x08,
		.frame_code = 0x20,
		.frame_previous = 0x30,
		.frame_instr = 0x38,
		.frame_entry = 0x44,
		.frame_owner = 0x45,
		.code_first = 0xb8, /* co_code_adaptive */
		.code_firstlineno = 0x48,
		.code_filename = 0x70,
		.code_qualname = 0x80,
		.code_linetable = 0x88,
		.code_firsttraceable = 0xa8,
		/* _PyRuntime.ceval.gil: its cond (0x188) and mutex (0x1b8) and the switch
		 * pair's, up to gilstate (0x238) */
		.gil_lo = 0x168,
		.gil_hi = 0x238,
		.str_length = 0x10,
		.str_state = 0x20,
		.str_ascii = 0x30,   /* sizeof(PyASCIIObject) */
		.str_compact = 0x48, /* sizeof(PyCompactUnicodeObject) */
		.bytes_size = 0x10,
		.bytes_data = 0x20,
		.owned_by_generator = 1,
		.owned_by_cstack = LP_PY_NO_SHIM,
	},
	{
		.version = 0x030c,	/* 3.12 */
		.interp_head = 0x28,	/* _PyRuntimeState.interpreters.head */
		.interp_threads = 0x48, /* PyInterpreterState.threads.head */
		.ts_next = 0x08,
		.ts_native_tid = 0x90,
		.ts_frame = 0x38,      /* PyThreadState.cframe */
		.cframe_current = 0x0, /* _PyCFrame lost use_tracing */
		.frame_code = 0x00,
		.frame_previous = 0x08,
		.frame_instr = 0x38,
		.frame_entry = 0x46, /* no is_entry: read, never used */
		.frame_owner = 0x46,
		.code_first = 0xc0,
		.code_firstlineno = 0x44,
		.code_filename = 0x70,
		.code_qualname = 0x80,
		.code_linetable = 0x88,
		.code_firsttraceable = 0xb0,
		/* _PyRuntime._main_interpreter (0x12a68)._gil, 0xd0 bytes */
		.gil_lo = 0x12e78,
		.gil_hi = 0x12f48,
		.str_length = 0x10,
		.str_state = 0x20,
		.str_ascii = 0x28, /* PyASCIIObject lost wstr */
		.str_compact = 0x38,
		.bytes_size = 0x10,
		.bytes_data = 0x20,
		.owned_by_generator = 1,
		.owned_by_cstack = 3,
	},
	{
		.version = 0x030d,	  /* 3.13 */
		.interp_head = 0x278,	  /* after _Py_DebugOffsets */
		.interp_threads = 0x1cb0, /* PyInterpreterState.threads.head */
		.ts_next = 0x08,
		.ts_native_tid = 0xa0,
		.ts_frame = 0x48, /* PyThreadState.current_frame: no _PyCFrame */
		.cframe_current = LP_PY_NO_CFRAME,
		.frame_code = 0x00, /* f_executable: the code object of every function's frame */
		.frame_previous = 0x08,
		.frame_instr = 0x38, /* instr_ptr: LASTI is taken from it as from prev_instr */
		.frame_entry = 0x46,
		.frame_owner = 0x46,
		.code_first = 0xc8,
		.code_firstlineno = 0x44,
		.code_filename = 0x70,
		.code_qualname = 0x80,
		.code_linetable = 0x88,
		.code_firsttraceable = 0xb8,
		/* _PyRuntime._main_interpreter (0x15920)._gil, 0xd0 bytes */
		.gil_lo = 0x17768,
		.gil_hi = 0x17838,
		.str_length = 0x10,
		.str_state = 0x20,
		.str_ascii = 0x28,
		.str_compact = 0x38,
		.bytes_size = 0x10,
		.bytes_data = 0x20,
		.owned_by_generator = 1,
		.owned_by_cstack = 3,
		.ndebug = sizeof(debug_313) / sizeof(debug_313[0]),
		.debug = debug_313,
	},
};

const char *const lp_python_patterns[] = {"_PyRuntime", "Py_Version", "_PyEval_EvalFrameDefault",
					  NULL};

void lp_py_versions(char *out, size_t size)
{
	size_t at = 0;

	if (size)
		out[0] = '\0';
	for (size_t i = 0; i < sizeof(layouts) / sizeof(layouts[0]) && at < size; i++)
		at += (size_t)snprintf(out + at, size - at, "%s%u.%u", i ? ", " : "",
				       layouts[i].version >> 8, layouts[i].version & 0xff);
}

const struct lp_py_layout *lp_py_layout_of(uint32_t version)
{
	for (size_t i = 0; i < sizeof(layouts) / sizeof(layouts[0]); i++)
		if (layouts[i].version == version >> 16)
			return &layouts[i];
	return NULL;
}

/* n bytes of pid's memory at addr: 0 or -errno. */
static int peek(pid_t pid, uint64_t addr, void *buf, size_t n)
{
	struct iovec l = {buf, n}, r = {(void *)(uintptr_t)addr, n};
	ssize_t got = process_vm_readv(pid, &l, 1, &r, 1, 0);

	return got == (ssize_t)n ? 0 : got < 0 ? -errno : -EIO;
}

static uint64_t peek_word(pid_t pid, uint64_t addr, int *err)
{
	uint64_t v = 0;

	if (!*err)
		*err = peek(pid, addr, &v, sizeof(v));
	return *err ? 0 : v;
}

/* Where the runtime's own statement of its layout (its _Py_DebugOffsets, where its version
 * has them) differs from the table's entry: the word's position, -1 where all agree
 * (or the version states none), 0 where it could not be read or lacks its cookie. */
static int debug_differs(pid_t pid, const struct lp_py_state *py)
{
	uint64_t w[LP_PY_DEBUG_WORDS];
	const struct lp_py_layout *lay = py->lay;

	if (!lay->ndebug)
		return -1;
	if (peek(pid, py->runtime, w, sizeof(w)) < 0 || memcmp(&w[0], "xdebugpy", 8) ||
	    w[1] != py->version)
		return 0;
	for (size_t i = 0; i < lay->ndebug; i++)
		if (lay->debug[i].word >= LP_PY_DEBUG_WORDS ||
		    w[lay->debug[i].word] != lay->debug[i].want)
			return lay->debug[i].word;
	return -1;
}

void lp_python_scan(const struct lp_core *c, pid_t pid, const char *comm, struct lp_py_state *py,
		    const struct lp_elf_result *syms, const char *path,
		    const struct lp_proc_mapping *m)
{
	const struct lp_elf_sym *rt = NULL, *ver = NULL, *eval = NULL;
	struct lp_py_proc k = {0};
	uint64_t bias, v = 0;
	__u32 key = (__u32)pid;
	int err = 0, at;

	if (py->state)
		return;
	for (size_t i = 0; i < syms->nsyms; i++) {
		const struct lp_elf_sym *s = &syms->syms[i];

		if (s->cls != LP_SYM_PYTHON)
			continue;
		if (!strcmp(s->name, "_PyRuntime"))
			rt = s;
		else if (!strcmp(s->name, "Py_Version"))
			ver = s;
		else if (!strcmp(s->name, "_PyEval_EvalFrameDefault"))
			eval = s;
	}
	/* The object's load bias from a function of this executable mapping: where its
	 * first instruction is in the process against its address in the file. */
	if (!rt || !eval || eval->file_off < m->pgoff ||
	    eval->file_off >= m->pgoff + (m->end - m->start))
		return;
	bias = m->start + (eval->file_off - m->pgoff) - eval->vaddr;
	py->runtime = bias + rt->vaddr;
	py->eval_lo = bias + eval->vaddr;
	py->eval_hi = py->eval_lo + eval->size;
	/* Py_Version (3.11 on): PY_VERSION_HEX; before it, no layout here anyway */
	if (ver)
		v = peek_word(pid, bias + ver->vaddr, &err);
	py->version = (uint32_t)v;
	py->lay = ver && !err ? lp_py_layout_of(py->version) : NULL;
	if (!ver || err) {
		py->state = -1;
		py->version = 0;
		py->why_not = ver ? "its version could not be read"
				  : "a CPython before 3.11 (no Py_Version), whose structures this "
				    "build does not know";
		log_warning("pid %d (%s) runs %s: its stacks keep their native frames", (int)pid,
			    comm, py->why_not);
		return;
	}
	if (!py->lay) {
		py->state = -1;
		py->why_not = "a version whose structures this build does not know";
		log_warning("pid %d (%s) runs CPython %u.%u, a version whose structures this "
			    "build does not know: its stacks keep their native frames",
			    (int)pid, comm, (py->version >> 24) & 0xff, (py->version >> 16) & 0xff);
		return;
	}
	if ((at = debug_differs(pid, py)) >= 0) {
		py->state = -1;
		py->why_not = "its own debug offsets differ from this build's table for its "
			      "version (a free-threaded or patched build)";
		log_warning("pid %d (%s) runs CPython %u.%u whose own debug offsets (word %d) "
			    "differ from this build's table for it (a free-threaded or patched "
			    "build): its stacks keep their native frames",
			    (int)pid, comm, (py->version >> 24) & 0xff, (py->version >> 16) & 0xff,
			    at);
		py->lay = NULL;
		return;
	}
	k.runtime = py->runtime;
	k.gil_lo = py->runtime + py->lay->gil_lo;
	k.gil_hi = py->runtime + py->lay->gil_hi;
	k.version = py->version;
	k.interp_head = py->lay->interp_head;
	k.interp_threads = py->lay->interp_threads;
	k.ts_next = py->lay->ts_next;
	k.ts_native_tid = py->lay->ts_native_tid;
	k.ts_frame = py->lay->ts_frame;
	k.cframe_current = py->lay->cframe_current;
	k.frame_code = py->lay->frame_code;
	k.frame_previous = py->lay->frame_previous;
	k.frame_instr = py->lay->frame_instr;
	k.frame_entry = py->lay->frame_entry;
	k.frame_owner = py->lay->frame_owner;
	k.code_first = py->lay->code_first;
	if (bpf_map_update_elem(bpf_map__fd(c->skel->maps.py_procs), &key, &k, BPF_ANY) < 0) {
		py->state = -1;
		py->why_not = "the kernel's table of CPython processes (py_procs) is full";
		log_warning("pid %d (%s): CPython %u.%u found, but its frames will not be "
			    "read: py_procs: %s",
			    (int)pid, comm, (py->version >> 24) & 0xff, (py->version >> 16) & 0xff,
			    strerror(errno));
		return;
	}
	py->state = 1;
	log_info("pid %d (%s) runs CPython %u.%u.%u (%s): its frames are read", (int)pid, comm,
		 (py->version >> 24) & 0xff, (py->version >> 16) & 0xff, (py->version >> 8) & 0xff,
		 path);
}

void lp_python_free(struct lp_py_state *py)
{
	for (size_t i = 0; i < py->nfuncs; i++) {
		free(py->funcs[i].name);
		free(py->funcs[i].file);
		free(py->funcs[i].linetable);
	}
	free(py->funcs);
	free(py->final);
	py->funcs = NULL;
	py->nfuncs = 0;
	py->final = NULL;
	py->nfinal = 0;
}

/* A str object's text as UTF-8 into out (at most size - 1 bytes, whole characters). */
static int read_str(pid_t pid, const struct lp_py_layout *lay, uint64_t addr, char *out,
		    size_t size)
{
	uint8_t head[0x48], raw[4 * LP_PY_NAME_MAX];
	uint64_t len;
	unsigned state, kind;
	size_t n = 0, at = 0;
	int r;

	out[0] = '\0';
	if (!addr || (r = peek(pid, addr, head, lay->str_compact)) < 0)
		return addr ? r : -ENOENT;
	memcpy(&len, head + lay->str_length, sizeof(len));
	state = head[lay->str_state];
	/* compact (0x20) strings only: every name and file of a code object is one */
	if (!(state & 0x20))
		return -ENOTSUP;
	kind = (state >> 2) & 7;
	if (kind != 1 && kind != 2 && kind != 4)
		return -EINVAL;
	if (len > LP_PY_NAME_MAX)
		len = LP_PY_NAME_MAX;
	if ((r = peek(pid, addr + ((state & 0x40) ? lay->str_ascii : lay->str_compact), raw,
		      len * kind)) < 0)
		return r;
	for (; n < len; n++) {
		uint32_t c = kind == 1	 ? raw[n]
			     : kind == 2 ? (uint32_t)(raw[2 * n] | raw[2 * n + 1] << 8)
					 : (uint32_t)(raw[4 * n] | raw[4 * n + 1] << 8 |
						      raw[4 * n + 2] << 16 |
						      (uint32_t)raw[4 * n + 3] << 24);
		char b[4];
		size_t k;

		if (c < 0x80) {
			b[0] = (char)c;
			k = 1;
		} else if (c < 0x800) {
			b[0] = (char)(0xc0 | c >> 6);
			b[1] = (char)(0x80 | (c & 0x3f));
			k = 2;
		} else if (c < 0x10000) {
			b[0] = (char)(0xe0 | c >> 12);
			b[1] = (char)(0x80 | ((c >> 6) & 0x3f));
			b[2] = (char)(0x80 | (c & 0x3f));
			k = 3;
		} else {
			b[0] = (char)(0xf0 | (c >> 18 & 7));
			b[1] = (char)(0x80 | ((c >> 12) & 0x3f));
			b[2] = (char)(0x80 | ((c >> 6) & 0x3f));
			b[3] = (char)(0x80 | (c & 0x3f));
			k = 4;
		}
		if (at + k >= size)
			break;
		memcpy(out + at, b, k);
		at += k;
	}
	out[at] = '\0';
	return 0;
}

/* Reads code object code of pid into f. */
static int read_func(pid_t pid, const struct lp_py_layout *lay, uint64_t code, struct lp_py_func *f)
{
	char qual[4 * LP_PY_NAME_MAX + 1], file[4 * LP_PY_NAME_MAX + 1],
		mod[4 * LP_PY_NAME_MAX + 1];
	uint8_t head[0x100];
	uint64_t qa, fa, lt, n = 0;
	int32_t first, trace;
	int r;

	/* a table entry whose code objects do not fit head is refused, not overrun */
	if (lay->code_first > sizeof(head))
		return -EINVAL;
	if ((r = peek(pid, code, head, lay->code_first)) < 0)
		return r;
	memcpy(&qa, head + lay->code_qualname, 8);
	memcpy(&fa, head + lay->code_filename, 8);
	memcpy(&lt, head + lay->code_linetable, 8);
	memcpy(&first, head + lay->code_firstlineno, 4);
	memcpy(&trace, head + lay->code_firsttraceable, 4);
	if ((r = read_str(pid, lay, qa, qual, sizeof(qual))) < 0 ||
	    (r = read_str(pid, lay, fa, file, sizeof(file))) < 0)
		return r;
	if (lt && peek(pid, lt + lay->bytes_size, &n, sizeof(n)) == 0 && n > 0 &&
	    n <= LP_PY_LINETABLE_MAX && (f->linetable = malloc(n))) {
		if (peek(pid, lt + lay->bytes_data, f->linetable, n) == 0) {
			f->nlinetable = n;
		} else {
			free(f->linetable);
			f->linetable = NULL;
		}
	}
	lp_py_module(file, mod, sizeof(mod));
	f->code = code;
	f->firstline = first > 0 ? (uint32_t)first : 0;
	f->firsttraceable = trace;
	f->file = strdup(file);
	if (mod[0] && asprintf(&f->name, "%s.%s", mod, qual) < 0)
		f->name = NULL;
	else if (!mod[0])
		f->name = strdup(qual);
	if (!f->file || !f->name) {
		free(f->file);
		free(f->name);
		free(f->linetable);
		memset(f, 0, sizeof(*f));
		return -ENOMEM;
	}
	return 0;
}

const struct lp_py_func *lp_python_func(struct lp_py_state *py, pid_t pid, uint64_t code)
{
	struct lp_py_func f = {0}, *v;
	size_t at;

	if (py->state != 1 || !code)
		return NULL;
	for (size_t i = 0; i < py->nfuncs; i++)
		if (py->funcs[i].code == code) {
			py->funcs[i].used = ++py->clock;
			return &py->funcs[i];
		}
	if (read_func(pid, py->lay, code, &f) < 0) {
		py->read_errors++;
		return NULL;
	}
	f.used = ++py->clock;
	if (py->nfuncs < LP_PY_FUNCS_MAX) {
		if (!(v = realloc(py->funcs, (py->nfuncs + 1) * sizeof(*v)))) {
			free(f.name);
			free(f.file);
			free(f.linetable);
			return NULL;
		}
		py->funcs = v;
		at = py->nfuncs++;
	} else {
		/* full: the least recently used gives way */
		at = 0;
		for (size_t i = 1; i < py->nfuncs; i++)
			if (py->funcs[i].used < py->funcs[at].used)
				at = i;
		free(py->funcs[at].name);
		free(py->funcs[at].file);
		free(py->funcs[at].linetable);
	}
	py->funcs[at] = f;
	return &py->funcs[at];
}

bool lp_py_shim(const struct lp_py_layout *lay, uint64_t w)
{
	return LP_PY_OWNER(w) == lay->owned_by_cstack;
}

bool lp_py_run_end(const struct lp_py_layout *lay, uint64_t w)
{
	return lp_py_shim(lay, w) || (lay->owned_by_cstack == LP_PY_NO_SHIM && LP_PY_ENTRY(w));
}

bool lp_py_incomplete(const struct lp_py_layout *lay, const struct lp_py_func *f, int lasti,
		      unsigned owner)
{
	return owner != lay->owned_by_generator && lasti < 2 * (f ? f->firsttraceable : 0);
}

struct outside_walk {
	pid_t pid;
	struct lp_py_state *py;
	void (*fn)(void *ctx, uint64_t code, const struct lp_py_func *f, uint64_t all,
		   uint64_t gen);
	void *ctx;
};

static int outside_one(void *ctx, const void *key, const void *value)
{
	const struct outside_walk *w = ctx;
	const struct lp_py_key *k = key;
	const struct lp_py_val *v = value;

	if (k->tgid == (__u32)w->pid)
		w->fn(w->ctx, k->code, k->code ? lp_python_func(w->py, w->pid, k->code) : NULL,
		      v->all, v->gen);
	return 0;
}

void lp_python_outside(const struct lp_core *c, pid_t pid, struct lp_py_state *py,
		       void (*fn)(void *ctx, uint64_t code, const struct lp_py_func *f,
				  uint64_t all, uint64_t gen),
		       void *ctx)
{
	struct outside_walk w = {pid, py, fn, ctx};

	if (py->state != 1)
		return;
	if (py->final) {
		for (size_t i = 0; i < py->nfinal; i++)
			fn(ctx, py->final[i].code,
			   py->final[i].code ? lp_python_func(py, pid, py->final[i].code) : NULL,
			   py->final[i].all, py->final[i].gen);
		return;
	}
	lp_map_walk(bpf_map__fd(c->skel->maps.py_samples), sizeof(struct lp_py_key),
		    sizeof(struct lp_py_val), outside_one, &w);
}

struct exit_walk {
	__u32 tgid;
	struct lp_py_state *py;
	struct lp_keys gone;
};

/* An exited process's entry: its last counts kept for its reports, its key to delete. */
static int exit_one(void *ctx, const void *key, const void *value)
{
	struct exit_walk *w = ctx;
	const struct lp_py_key *k = key;
	const struct lp_py_val *v = value;
	struct lp_py_count *x;

	if (k->tgid != w->tgid)
		return 0;
	x = realloc(w->py->final, (w->py->nfinal + 1) * sizeof(*x));
	if (x) {
		w->py->final = x;
		x[w->py->nfinal++] = (struct lp_py_count){k->code, v->all, v->gen};
	}
	lp_keys_add(&w->gone, key);
	return 0;
}

void lp_python_exit(const struct lp_core *c, pid_t pid, struct lp_py_state *py)
{
	int fd = bpf_map__fd(c->skel->maps.py_samples);
	struct exit_walk w = {
		.tgid = (__u32)pid, .py = py, .gone = {.size = sizeof(struct lp_py_key)}};

	bpf_map_delete_elem(bpf_map__fd(c->skel->maps.py_procs), &w.tgid);
	lp_map_walk(fd, sizeof(struct lp_py_key), sizeof(struct lp_py_val), exit_one, &w);
	lp_map_delete(fd, &w.gone);
}

static void name_one(void *ctx, uint64_t code, const struct lp_py_func *f, uint64_t all,
		     uint64_t gen)
{
	(void)ctx;
	(void)code;
	(void)f;
	(void)all;
	(void)gen;
}

void lp_python_name(const struct lp_core *c, pid_t pid, struct lp_py_state *py)
{
	/* naming is lp_python_outside's side effect: each code object read once */
	if (py->state == 1 && !py->final)
		lp_python_outside(c, pid, py, name_one, NULL);
}
