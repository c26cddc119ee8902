// parallel/mesh — the device mesh (DESIGN §3): world = dp × pp × tp, tp
// fastest, then dp, then pp (rank = pp_rank·dp·tp + dp_rank·tp + tp_rank),
// so a tensor-parallel group is a run of neighbouring ranks. Each group is
// a sub-communicator of the world made with comm_split: ranks in the same
// (pp, dp) form a TP group, the same (pp, tp) a DP group, the same (dp, tp)
// a PP group.
#ifndef TSR_PARALLEL_MESH_H
#define TSR_PARALLEL_MESH_H

#include "comm/comm.h"
#include "core/check.h"

typedef struct Mesh {
    int dp, tp, pp;
    int rank, dp_rank, tp_rank, pp_rank;
    Comm *world, *dpg, *tpg, *ppg;   // the groups this rank belongs to (world is not owned)
} Mesh;

// A world rank's coordinates.
void mesh_coords(int rank, int dp, int tp, int pp, int *dp_rank, int *tp_rank, int *pp_rank);
// Splits world into the mesh's groups. Every rank of world calls it; the
// sizes must multiply to the world size (else ERR_USAGE naming them).
int mesh_init(Mesh *m, Comm *world, int dp, int tp, int pp, Err *err);
void mesh_free(Mesh *m);
// The mesh of one process: dp = tp = pp = 1, no communicators.
Mesh mesh_single(void);

#endif
