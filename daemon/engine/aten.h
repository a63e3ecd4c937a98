/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* PyTorch's aten ops from libtorch's symbols, named as torch.profiler names them, and their
 * groups. Pure: unit-tested (tests/unit/test_aten.c).
 *
 * Every operator has a struct in at::_ops whose call and redispatch functions are the
 * dispatcher's entry points (exported: libtorch_cpu.so's .dynsym). The struct is the
 * schema's name with its overload: "add.Tensor" is at::_ops::add_Tensor, "add_.Tensor"
 * add__Tensor, "_softmax" _softmax. torch.profiler names an op "aten::" and the name
 * without its overload, which the struct's name alone does not tell ("softmax_int" is
 * softmax.int, "native_layer_norm" is itself): the schema strings registered in the
 * library's .rodata ("add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor")
 * do, and its "aten::<name>" strings where a schema is not among them. */
#ifndef LLMPROF_ATEN_H
#define LLMPROF_ATEN_H

#include <stdbool.h>
#include <stddef.h>

#include "engine/ops.h"

/* The library's op names: each schema's struct name with its name, sorted by struct name;
 * and the "aten::" names, sorted. */
struct lp_aten_names {
	struct lp_aten_schema {
		char *st;   /* "add_Tensor" */
		char *name; /* "add" */
	} * schemas;
	size_t nschemas;
	char **names;
	size_t nnames;
};

/* Reads the strings of a .rodata section (NUL-terminated, any order). Returns 0 or
 * -ENOMEM. */
int lp_aten_names_read(const char *rodata, size_t size, struct lp_aten_names *out);
void lp_aten_names_free(struct lp_aten_names *n);

/* The struct of an at::_ops entry point, "_ZN2at4_ops10add_Tensor4callE..." (call or
 * redispatch): writes "add_Tensor" to out and returns 0, or -ENOENT for another symbol. */
int lp_aten_struct(const char *sym, char *out, size_t size);

/* The op as torch.profiler names it ("aten::add") of an at::_ops entry point: by the
 * schemas, else the longest "aten::" name the struct's name starts with (an overload
 * after '_'), else the struct's own name. Returns 0, or -ENOENT for another symbol. */
int lp_aten_op(const struct lp_aten_names *n, const char *sym, char *out, size_t size);

/* The group of an aten op ("aten::mm": matmul). */
enum lp_op_group lp_aten_group(const char *op);

#endif
