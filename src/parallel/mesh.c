#include "parallel/mesh.h"

#include <string.h>

void mesh_coords(int rank, int dp, int tp, int pp, int *dp_rank, int *tp_rank, int *pp_rank) {
    (void)pp;
    *tp_rank = rank % tp;
    *dp_rank = rank / tp % dp;
    *pp_rank = rank / (tp * dp);
}

int mesh_init(Mesh *m, Comm *world, int dp, int tp, int pp, Err *err) {
    memset(m, 0, sizeof *m);
    int n = comm_size(world);
    if (dp < 1 || tp < 1 || pp < 1 || (long long)dp * tp * pp != n)
        return err_set(err, ERR_USAGE, "dp %d × tp %d × pp %d = %lld ranks, but %d were started", dp, tp, pp,
                       (long long)dp * tp * pp, n);
    m->dp = dp;
    m->tp = tp;
    m->pp = pp;
    m->world = world;
    m->rank = comm_rank(world);
    mesh_coords(m->rank, dp, tp, pp, &m->dp_rank, &m->tp_rank, &m->pp_rank);
    if (comm_split(world, m->pp_rank * dp + m->dp_rank, m->tp_rank, "tp", &m->tpg, err) ||
        comm_split(world, m->pp_rank * tp + m->tp_rank, m->dp_rank, "dp", &m->dpg, err) ||
        comm_split(world, m->dp_rank * tp + m->tp_rank, m->pp_rank, "pp", &m->ppg, err)) {
        mesh_free(m);
        return -1;
    }
    return 0;
}

void mesh_free(Mesh *m) {
    comm_free(m->tpg);
    comm_free(m->dpg);
    comm_free(m->ppg);
    m->tpg = m->dpg = m->ppg = NULL;
}

Mesh mesh_single(void) { return (Mesh){.dp = 1, .tp = 1, .pp = 1}; }
