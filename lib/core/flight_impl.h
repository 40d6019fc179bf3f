/* Private: the flight recorder's rings (flight.h) as the communicator wrapper (comm.c, comm_async.c) writes
 * them. Every function takes a NULL ring and then does nothing, so the wrapper records unconditionally. A ring
 * is written by the thread that makes its communicator's calls; fsc_flight_write reads it from any thread. */
#ifndef FSC_CORE_FLIGHT_IMPL_H
#define FSC_CORE_FLIGHT_IMPL_H
#include <stddef.h>
#include <stdint.h>
#include "fsc/comm.h"
#include "fsc/flight.h"

typedef struct flight_ring flight_ring;

#define FLIGHT_OP_SPLIT FSC_OP_COUNT /* a split's entry: next to fsc_comm_op, "split" in the record */
#define FLIGHT_WORLD_GID 0x66736377726c6400ull /* the id of a communicator made by fsc_comm_wrap */

/* The id of the group made by the n-th split (from 1) of the group gid with color. */
uint64_t flight_child_gid(uint64_t gid, unsigned n, int color);

/* N of a record's file name "flight-rank-N.json" (N below max, without leading zeros), or -1: the names
 * fsc_flight_write gives, as the reader (io/flight_read.c) and a new recorder setting earlier ones aside read them. */
int flight_rank_of_name(const char *name, int max);

/* Holds on a recorder (a watcher's, flight_watch.c); the last release frees it. */
void flight_ref(fsc_flight *f);
void flight_unref(fsc_flight *f);

/* A ring of f's depth for a communicator (its group id, rank, size, name); NULL when f is NULL or memory
 * is short (the communicator then records nothing). */
flight_ring *flight_ring_attach(fsc_flight *f, uint64_t gid, int rank, int size, const char *name);
/* The communicator is freed or records elsewhere: the ring stays in its recorder's records, marked closed. */
void flight_ring_detach(flight_ring *r);
fsc_flight *flight_ring_owner(const flight_ring *r);
void flight_ring_rename(flight_ring *r, const char *name);

/* Call number seq starts: op (fsc_comm_op or FLIGHT_OP_SPLIT), count elements of dt, peer (root, peer or
 * color; -1 none); waiting 1 when the rank blocks in it now, 0 when it is issued to run in the background.
 * Returns the slot to pass to the two functions below. */
size_t flight_begin(flight_ring *r, uint64_t seq, int op, size_t count, fsc_dtype dt, int peer, int waiting);
/* The rank now blocks on an issued call. */
void flight_wait(flight_ring *r, size_t slot, uint64_t seq);
/* The call returned s; a failure freezes the recorder. The slot is left alone if the ring has moved on. */
void flight_end(flight_ring *r, size_t slot, uint64_t seq, fsc_status s);

#endif
