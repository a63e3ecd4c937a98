/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Reading and deleting the entries of a kernel hash map in bulk: up to LP_MAP_BATCH entries
 * per system call where the kernel has batch operations, an entry per call where it does
 * not. Every pass over a map the daemon makes goes through here. */
#ifndef LLMPROF_DAEMON_MAPWALK_H
#define LLMPROF_DAEMON_MAPWALK_H

#include <stddef.h>

/* Entries read per BPF_MAP_LOOKUP_BATCH call (more when one hash bucket holds more). */
#define LP_MAP_BATCH 256

/* Called for each entry: 0 goes on, anything else stops the walk and is returned by it. */
typedef int (*lp_map_visit_fn)(void *ctx, const void *key, const void *value);

/* Calls visit for every entry of the hash map fd, whose keys are key_size bytes and values
 * value_size bytes (0: keys only, visit gets NULL values). Entries added or deleted during the walk may or may not be visited, as
 * with BPF_MAP_GET_NEXT_KEY; visit may collect keys for lp_map_delete() but must not delete
 * them itself (the entry-per-call fallback would start over). Returns 0, visit's nonzero
 * value, or -errno. */
int lp_map_walk(int fd, size_t key_size, size_t value_size, lp_map_visit_fn visit, void *ctx);

/* Keys collected for deletion. */
struct lp_keys {
	unsigned char *v;
	size_t n, cap, size;
};

/* Appends a key of keys->size bytes; 0 or -ENOMEM. */
int lp_keys_add(struct lp_keys *keys, const void *key);

/* Deletes every collected key from the map fd, in batches (keys already gone are skipped),
 * then empties and frees the list. */
void lp_map_delete(int fd, struct lp_keys *keys);

#endif
