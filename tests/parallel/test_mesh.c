// parallel/mesh: on 8 forked ranks, every dp × tp × pp layout puts each rank
// at the coordinates DESIGN §3 says (tp fastest, then dp, then pp), and each
// group holds exactly the ranks that share the other two coordinates, in
// order; a layout that does not multiply to the world is refused.
#include <string.h>

#include "comm/local.h"
#include "parallel/mesh.h"
#include "test.h"

static const int layouts[][3] = {{2, 2, 2}, {4, 2, 1}, {1, 2, 4}, {8, 1, 1}, {1, 8, 1}, {2, 1, 4}};

// Returns the number of wrong facts seen by this rank.
static int mesh_main(Comm *world, void *arg) {
    const int *l = arg;
    int dp = l[0], tp = l[1], pp = l[2], r = comm_rank(world), bad = 0;
    Mesh m;
    Err e;
    if (mesh_init(&m, world, dp, tp, pp, &e)) { fprintf(stderr, "%s\n", e.msg); return 1; }
    bad += m.rank != r || r != m.pp_rank * dp * tp + m.dp_rank * tp + m.tp_rank;
    bad += comm_size(m.tpg) != tp || comm_size(m.dpg) != dp || comm_size(m.ppg) != pp;
    bad += comm_rank(m.tpg) != m.tp_rank || comm_rank(m.dpg) != m.dp_rank || comm_rank(m.ppg) != m.pp_rank;
    // each group gathers its members' world ranks: they differ from this
    // rank only in the group's own coordinate
    int32_t me = r, got[8];
    Comm *g[3] = {m.tpg, m.dpg, m.ppg};
    int stride[3] = {1, tp, tp * dp};
    for (int k = 0; k < 3; k++) {
        int n = comm_size(g[k]), mine = k == 0 ? m.tp_rank : k == 1 ? m.dp_rank : m.pp_rank;
        if (comm_allgather(g[k], &me, got, 1, DT_I32, &e)) { fprintf(stderr, "%s\n", e.msg); bad++; continue; }
        for (int i = 0; i < n; i++) bad += got[i] != r + (i - mine) * stride[k];
    }
    mesh_free(&m);
    return bad;
}

static int wrong_main(Comm *world, void *arg) {
    (void)arg;
    Mesh m;
    Err e;
    int rc = mesh_init(&m, world, 2, 2, 1, &e);
    return !(rc == -1 && e.code == ERR_USAGE && strstr(e.msg, "but 3 were started"));
}

static void test_layouts(void) {
    for (size_t i = 0; i < sizeof layouts / sizeof *layouts; i++) {
        Err e;
        EXPECT(comm_launch(8, mesh_main, (void *)layouts[i], 60, &e) == 0, "dp %d tp %d pp %d: %s", layouts[i][0],
               layouts[i][1], layouts[i][2], e.msg);
    }
}

static void test_wrong_size(void) {
    Err e;
    EXPECT(comm_launch(3, wrong_main, NULL, 60, &e) == 0, "a 2×2×1 mesh on 3 ranks was not refused: %s", e.msg);
}

int main(void) {
    RUN(test_layouts);
    RUN(test_wrong_size);
    return test_finish();
}
