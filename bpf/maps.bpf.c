// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* The one definition of every map and setting the collectors share (lp.bpf.h). */
#define LP_MAPS_HERE
#include "lp.bpf.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

const volatile __u32 pidns_ino = 0;
const volatile bool want_exec_events = false;
const volatile bool stack_scan = true;
const volatile bool unwind_cfi = true;
const volatile bool futex_from_sched = false;
volatile __u32 recordings = 0;
volatile __u32 precise_procs = 0;
volatile __u32 profiles = 0;
volatile __u64 stacks_lost = 0;
const volatile __u32 stretch_sample = 1;
