// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Unit tests of aten op names from libtorch's symbols (engine/aten.h): the struct of an
 * at::_ops entry point, the op's name by the schemas in .rodata and by its "aten::" names
 * where a schema is missing, the groups; and, where this machine has Debian's
 * python3-torch, every exported entry point of its libtorch_cpu.so named, against the
 * schema strings the library holds (read here another way: strings of the file). The
 * mangled names below are real ones, read from that library (PyTorch 1.13). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "engine/aten.h"
#include "formats/elfsym.h"

/* A .rodata as the library lays it out: strings one after another, schemas among them. */
static const char rodata[] =
	"add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor\0"
	"add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)\0"
	"_softmax(Tensor self, int dim, bool half_to_float) -> Tensor\0"
	"native_layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight, Tensor? "
	"bias, float eps) -> (Tensor, Tensor, Tensor)\0"
	"mm(Tensor self, Tensor mat2) -> Tensor\0"
	"aten::softmax\0aten::mul\0aten::index_select\0aten::embedding\0"
	"not a schema (at all) -> no\0x.y(\0aten::bad name\0"
	"mm(Tensor self, Tensor mat2) -> Tensor\0";

static const char *op(const struct lp_aten_names *n, const char *sym)
{
	static char out[LP_OP_NAME_MAX];

	return lp_aten_op(n, sym, out, sizeof(out)) == 0 ? out : NULL;
}

#define OP_IS(n, sym, want)                                                                   \
	do {                                                                                  \
		const char *got = op(n, sym);                                                 \
		CHECK(got && !strcmp(got, want), "%s -> %s, not %s", sym, got ? got : "none", \
		      want);                                                                  \
	} while (0)

/* Every at::_ops entry point of the installed libtorch named: "aten::" and a name of its
 * schemas (a struct's name is its schema's name and overload) or of its "aten::" strings. */
static void installed(void)
{
	const char *path = "/usr/lib/x86_64-linux-gnu/libtorch_cpu.so.1.13.0";
	const char *const *lists[] = {(const char *const[]){"_ZN2at4_ops*", NULL}};
	struct lp_elf_patterns pat = {.lists = lists, .nclasses = 1};
	struct lp_elf_result res;
	struct lp_aten_names n;
	size_t size, named = 0, mm = 0, groups[LP_G_NR] = {0};
	char *ro, out[LP_OP_NAME_MAX];
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0) {
		printf("skipped: %s is not installed here (python3-torch)\n", path);
		return;
	}
	CHECK(lp_elf_section(fd, ".rodata", 256u << 20, &ro, &size) == 0 && size > 1000000,
	      "libtorch_cpu's .rodata read: %zu bytes", size);
	CHECK(lp_aten_names_read(ro, size, &n) == 0 && n.nschemas > 2000 && n.nnames > 1000,
	      "its schemas (%zu) and names (%zu)", n.nschemas, n.nnames);
	CHECK(lp_elf_find(fd, &pat, &res) == 0 && res.nsyms > 5000, "its at::_ops symbols: %zu",
	      res.nsyms);
	for (size_t i = 0; i < res.nsyms; i++) {
		if (lp_aten_op(&n, res.syms[i].name, out, sizeof(out)) < 0)
			continue;
		named++;
		mm += !strcmp(out, "aten::mm");
		groups[lp_aten_group(out)]++;
	}
	CHECK(named == res.nsyms, "every entry point named: %zu of %zu", named, res.nsyms);
	/* mm and mm.out, each its call and redispatch: torch.profiler's aten::mm */
	CHECK(mm == 4, "aten::mm's: %zu", mm);
	CHECK(groups[LP_G_MATMUL] >= 20 && groups[LP_G_NORM] >= 20 && groups[LP_G_OTHER] > 1000,
	      "groups: matmul %zu, norm %zu, other %zu", groups[LP_G_MATMUL], groups[LP_G_NORM],
	      groups[LP_G_OTHER]);
	OP_IS(&n, "_ZN2at4_ops11softmax_int4callERKNS_6TensorElN3c108optionalINS5_10ScalarTypeEEE",
	      "aten::softmax");
	lp_elf_result_free(&res);
	lp_aten_names_free(&n);
	free(ro);
	close(fd);
}

int main(void)
{
	struct lp_aten_names n;
	char st[64];

	CHECK(lp_aten_names_read(rodata, sizeof(rodata) - 1, &n) == 0, "the strings read");
	CHECK(n.nschemas == 5, "5 schemas (one twice): %zu", n.nschemas);
	CHECK(n.nnames == 4, "4 names, the one with a space left out: %zu", n.nnames);
	CHECK(lp_aten_struct("_ZN2at4_ops10add_Tensor4callERKNS_6TensorES4_RKN3c106ScalarE", st,
			     sizeof(st)) == 0 &&
		      !strcmp(st, "add_Tensor"),
	      "the struct of add.Tensor's call: %s", st);
	CHECK(lp_aten_struct("_ZN2at4_ops10add_Tensor10redispatchEN3c1014DispatchKeySetERKNS_"
			     "6TensorES6_RKNS2_6ScalarE",
			     st, sizeof(st)) == 0 &&
		      !strcmp(st, "add_Tensor"),
	      "... and of its redispatch");
	CHECK(lp_aten_struct("_ZN2at4_ops10add_Tensor6schemaE", st, sizeof(st)) == -ENOENT,
	      "another member is no entry point");
	CHECK(lp_aten_struct("_ZN2at6native6linearERKNS_6TensorES3_", st, sizeof(st)) == -ENOENT,
	      "a kernel is no entry point");
	CHECK(lp_aten_struct("_ZN2at4_ops99x4callE", st, sizeof(st)) == -ENOENT,
	      "a length past the name's end");
	OP_IS(&n, "_ZN2at4_ops10add_Tensor4callERKNS_6TensorES4_RKN3c106ScalarE", "aten::add");
	OP_IS(&n, "_ZN2at4_ops11add__Tensor4callERNS_6TensorERKS2_RKN3c106ScalarE", "aten::add_");
	OP_IS(&n, "_ZN2at4_ops8_softmax4callERKNS_6TensorElb", "aten::_softmax");
	OP_IS(&n, "_ZN2at4_ops17native_layer_norm4callERKNS_6TensorEN3c108ArrayRefINS5_6SymIntEEE",
	      "aten::native_layer_norm");
	/* No schema: the longest name it starts with, before an overload. */
	OP_IS(&n, "_ZN2at4_ops11softmax_int4callERKNS_6TensorE", "aten::softmax");
	OP_IS(&n, "_ZN2at4_ops10mul_Tensor4callERKNS_6TensorES4_", "aten::mul");
	/* No name either: its struct's. */
	OP_IS(&n, "_ZN2at4_ops7foo_bar4callERKNS_6TensorE", "aten::foo_bar");
	OP_IS(NULL, "_ZN2at4_ops2mm4callERKNS_6TensorES4_", "aten::mm");

	CHECK(lp_aten_group("aten::mm") == LP_G_MATMUL &&
		      lp_aten_group("aten::addmm") == LP_G_MATMUL &&
		      lp_aten_group("aten::bmm") == LP_G_MATMUL,
	      "matmul");
	CHECK(lp_aten_group("aten::_softmax") == LP_G_ATTENTION &&
		      lp_aten_group("aten::scaled_dot_product_attention") == LP_G_ATTENTION,
	      "attention");
	CHECK(lp_aten_group("aten::native_layer_norm") == LP_G_NORM, "norm");
	CHECK(lp_aten_group("aten::silu") == LP_G_ACTIVATION &&
		      lp_aten_group("aten::gelu") == LP_G_ACTIVATION &&
		      lp_aten_group("aten::silu_") == LP_G_ACTIVATION,
	      "activation, in place too");
	CHECK(lp_aten_group("aten::index_select") == LP_G_EMBEDDING &&
		      lp_aten_group("aten::embedding") == LP_G_EMBEDDING,
	      "embedding");
	CHECK(lp_aten_group("aten::cat") == LP_G_COPY && lp_aten_group("aten::copy_") == LP_G_COPY,
	      "copy");
	CHECK(lp_aten_group("aten::mul") == LP_G_ELEMENTWISE &&
		      lp_aten_group("aten::add_") == LP_G_ELEMENTWISE &&
		      lp_aten_group("aten::rsqrt") == LP_G_ELEMENTWISE,
	      "elementwise");
	CHECK(lp_aten_group("aten::mean") == LP_G_OTHER &&
		      lp_aten_group("aten::argmax") == LP_G_OTHER,
	      "reductions are other ops");
	lp_aten_names_free(&n);
	installed();
	return check_done();
}
