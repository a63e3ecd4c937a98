/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* CPython in a tracked process, whatever its engine (torch's decoders, llama-cpp-python,
 * a server in front of an engine): its interpreter found by its symbols (_PyRuntime,
 * Py_Version, _PyEval_EvalFrameDefault in the executable or libpython), the layout of its
 * version's structures (a table, one entry per minor version, each checked against that
 * version's headers and a running interpreter), the kernel told where its threads' frames
 * are (py_procs: python.bpf.c), and code objects named: a function's module and
 * qualified name, its file, the line of an instruction. */
#ifndef LLMPROF_ENGINE_PYTHON_H
#define LLMPROF_ENGINE_PYTHON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/procfs.h"
#include "formats/elfsym.h"
#include "kernel/core.h"

/* Where a minor version keeps what the walk and the naming read, bytes into each
 * structure. */
struct lp_py_layout {
	unsigned version; /* PY_VERSION_HEX >> 16: 0x030b */
	/* read by the kernel (struct lp_py_proc) */
	uint16_t interp_head, interp_threads, ts_next, ts_native_tid, ts_frame, cframe_current;
	uint16_t frame_code, frame_previous, frame_instr, frame_entry, frame_owner, code_first;
	/* read here */
	uint16_t code_firstlineno, code_filename, code_qualname, code_linetable;
	uint16_t code_firsttraceable;
	uint32_t gil_lo, gil_hi;	 /* the GIL's futex words, from _PyRuntime */
	uint16_t str_length, str_state;	 /* PyASCIIObject */
	uint16_t str_ascii, str_compact; /* where a compact ASCII / other string's text is */
	uint16_t bytes_size, bytes_data; /* PyBytesObject */
	uint8_t owned_by_generator;	 /* a frame's owner for a generator's (never incomplete) */
	/* Where a run of frames one interpreter call ran ends: 3.11 marks its first frame
	 * (is_entry); from 3.12 the call links a shim frame of its own beneath it, owned by
	 * the C stack (FRAME_OWNED_BY_CSTACK), which is no function (LP_PY_NO_SHIM: none). */
	uint8_t owned_by_cstack;
	/* What the runtime states of its own layout (3.13's _Py_DebugOffsets at _PyRuntime's
	 * start, 8-byte words): each word at a position that must equal a value of this
	 * table, or its processes' frames are not read (a free-threaded or patched build). */
	uint16_t ndebug;
	const struct lp_py_debug_word {
		uint16_t word, want;
	} * debug;
};
#define LP_PY_NO_SHIM 0xff
#define LP_PY_DEBUG_WORDS 80 /* read of _Py_DebugOffsets (3.13: 73) */

/* The symbols that find it (engine.h's class LP_SYM_PYTHON), NULL-terminated. */
extern const char *const lp_python_patterns[];

/* The minor versions this build knows, as text ("3.11"), into out. */
void lp_py_versions(char *out, size_t size);

/* The layout of a version (PY_VERSION_HEX), or NULL: not known to this build. */
const struct lp_py_layout *lp_py_layout_of(uint32_t version);

/* A Python function as a code object names it, read from its process once. */
#define LP_PY_NAME_MAX 256
struct lp_py_func {
	uint64_t code; /* the code object's address */
	char *name;    /* module.qualname (lp_py_module) */
	char *file;    /* co_filename */
	uint32_t firstline;
	int32_t firsttraceable; /* its first traceable instruction, in code units */
	uint8_t *linetable;	/* co_linetable, at most LP_PY_LINETABLE_MAX bytes */
	size_t nlinetable;
	uint64_t used; /* the cache's clock at its last use */
};
#define LP_PY_LINETABLE_MAX 65536
#define LP_PY_FUNCS_MAX 4096 /* per process: the least recently used let go first */

/* A process's samples outside ops for one code object (0: no Python frame). */
struct lp_py_count {
	uint64_t code, all, gen;
};

/* What a tracked process's CPython is to the daemon (in struct lp_eproc). */
struct lp_py_state {
	/* 0: no CPython found (yet); 1: its frames are read; -1: a version this build has no
	 * layout for (its stacks keep their native frames), or its structures could not be
	 * read */
	int state;
	const char *why_not;	   /* state -1: why, for the user */
	uint32_t version;	   /* PY_VERSION_HEX */
	uint64_t runtime;	   /* _PyRuntime's address */
	uint64_t eval_lo, eval_hi; /* _PyEval_EvalFrameDefault's code, in the process */
	const struct lp_py_layout *lay;
	struct lp_py_func *funcs; /* named code objects */
	size_t nfuncs;
	uint64_t clock;
	uint64_t read_errors;	   /* code objects that could not be read */
	struct lp_py_count *final; /* its samples outside ops by function, at its exit */
	size_t nfinal;
};

/* Looks for CPython in mapping m of the object at path, with symbols syms, of tracked
 * process pid (comm, for the log): the first one found becomes py (py_procs written where
 * its version is known). */
void lp_python_scan(const struct lp_core *c, pid_t pid, const char *comm, struct lp_py_state *py,
		    const struct lp_elf_result *syms, const char *path,
		    const struct lp_proc_mapping *m);
/* The process exited: its last counts kept (py->final), its kernel entries gone. */
void lp_python_exit(const struct lp_core *c, pid_t pid, struct lp_py_state *py);
/* The code objects new in a running process's counts named, while it is there to read
 * them from (once a second). */
void lp_python_name(const struct lp_core *c, pid_t pid, struct lp_py_state *py);
void lp_python_free(struct lp_py_state *py);

/* The function of code object code in process pid, read now if new (NULL: not read). */
const struct lp_py_func *lp_python_func(struct lp_py_state *py, pid_t pid, uint64_t code);

/* Whether frame word w (abi.h's LP_PY_WORD) is an interpreter call's shim (3.12 on): no
 * function. */
bool lp_py_shim(const struct lp_py_layout *lay, uint64_t w);
/* Whether w ends a run of frames one interpreter call ran (the run's first frame, or from
 * 3.12 its shim). */
bool lp_py_run_end(const struct lp_py_layout *lay, uint64_t w);

/* Whether a frame of f at lasti was not begun yet (CPython's _PyFrame_IsIncomplete): its
 * traceback leaves it out, and so does a stack. */
bool lp_py_incomplete(const struct lp_py_layout *lay, const struct lp_py_func *f, int lasti,
		      unsigned owner);

/* The process's samples outside ops by Python function (py_samples), each named: calls
 * fn for each code object, f NULL where it could not be read; code 0: threads running no
 * Python. */
void lp_python_outside(const struct lp_core *c, pid_t pid, struct lp_py_state *py,
		       void (*fn)(void *ctx, uint64_t code, const struct lp_py_func *f,
				  uint64_t all, uint64_t gen),
		       void *ctx);

#endif
