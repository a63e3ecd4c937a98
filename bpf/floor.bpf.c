// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* The floor of a scheduler collector (bench/sched.py): programs of the types llmprofd uses
 * on the same tracepoints, with empty bodies. What they cost is what any in-kernel
 * scheduler collector costs at least on a kernel; bench/floor.c loads them. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

SEC("tp_btf/sched_switch")
int BPF_PROG(floor_switch_btf)
{
	return 0;
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(floor_wakeup_btf)
{
	return 0;
}

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(floor_wakeup_new_btf)
{
	return 0;
}

SEC("raw_tp/sched_switch")
int BPF_PROG(floor_switch_raw)
{
	return 0;
}

SEC("raw_tp/sched_wakeup")
int BPF_PROG(floor_wakeup_raw)
{
	return 0;
}

SEC("raw_tp/sched_wakeup_new")
int BPF_PROG(floor_wakeup_new_raw)
{
	return 0;
}

/* The floor of the futex collector and the mmap discovery hook (bench/syscalls.py): the
 * tracepoints they use. */
SEC("tp/syscalls/sys_enter_futex")
int floor_futex_enter(void *ctx)
{
	return 0;
}

SEC("tp/syscalls/sys_exit_futex")
int floor_futex_exit(void *ctx)
{
	return 0;
}

SEC("tp_btf/mmap_lock_released")
int BPF_PROG(floor_mmap_lock)
{
	return 0;
}
