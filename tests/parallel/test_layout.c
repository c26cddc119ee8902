// parallel/layout: on 8 forked ranks, every dp × tp × pp layout puts each
// rank at the coordinates DESIGN §3 says (tp fastest, then dp, then pp),
// and each group holds exactly the ranks that share the other two
// coordinates, in order; a layout that does not multiply to the world is
// refused. On paper: the checkpoint files of the ranks that write are
// distinct and number layout_ckpt_files; the loss, the TP-replicated
// tensors and ZeRO-0's gradients are counted by exactly one rank of each
// group; a tied copy is held by the last stage only; the communicators a
// pipeline splits are the ones layout_comms lists.
#include <string.h>

#include "comm/local.h"
#include "parallel/layout.h"
#include "test.h"

static const int layouts[][3] = {{2, 2, 2}, {4, 2, 1}, {1, 2, 4}, {8, 1, 1}, {1, 8, 1}, {2, 1, 4}};

// Returns the number of wrong facts seen by this rank.
static int layout_main(Comm *world, void *arg) {
    const int *a = arg;
    int dp = a[0], tp = a[1], pp = a[2], r = comm_rank(world), bad = 0;
    Layout m = {.dp = dp, .tp = tp, .pp = pp};
    Err e;
    if (layout_init(&m, world, &e)) { fprintf(stderr, "%s\n", e.msg); return 1; }
    bad += m.rank != r || r != m.pp_rank * dp * tp + m.dp_rank * tp + m.tp_rank;
    bad += layout_rank_at(&m, m.dp_rank, m.tp_rank, m.pp_rank) != r;
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
    layout_free(&m);
    return bad;
}

static int wrong_main(Comm *world, void *arg) {
    (void)arg;
    Layout m = {.dp = 2, .tp = 2, .pp = 1};
    Err e;
    int rc = layout_init(&m, world, &e);
    return !(rc == -1 && e.code == ERR_USAGE && strstr(e.msg, "but 3 were started"));
}

static void test_groups(void) {
    for (size_t i = 0; i < sizeof layouts / sizeof *layouts; i++) {
        Err e;
        EXPECT(comm_launch(8, layout_main, (void *)layouts[i], 60, &e) == 0, "dp %d tp %d pp %d: %s", layouts[i][0],
               layouts[i][1], layouts[i][2], e.msg);
    }
}

static void test_wrong_size(void) {
    Err e;
    EXPECT(comm_launch(3, wrong_main, NULL, 60, &e) == 0, "a 2×2×1 layout on 3 ranks was not refused: %s", e.msg);
}

// Every rank of every layout of up to 24 ranks: the writers' files are
// distinct and fill [0, layout_ckpt_files); each value held alike by
// several ranks is counted once.
static void test_counting(void) {
    ModelConfig tied, untied;
    Err e;
    EXPECT(config_preset(&tied, "gpt2-tiny", &e) == 0 && config_preset(&untied, "llama-tiny", &e) == 0, "%s", e.msg);
    int bad = 0, n = 0;
    for (int dp = 1; dp <= 4; dp++) for (int tp = 1; tp <= 3; tp++) for (int pp = 1; pp <= 2; pp++) for (int z = 0; z <= 3; z++) {
        Layout l = {.dp = dp, .tp = tp, .pp = pp, .zero = z};
        int world = layout_devices(&l), files = layout_ckpt_files(&l), seen[24] = {0}, loss = 0, tied_copies = 0;
        int owners = 0, tp_counters = 0;
        for (int r = 0; r < world; r++) {
            layout_place(&l, r);
            if (layout_dp_owner(&l)) {
                int f = layout_ckpt_file(&l);
                bad += f < 0 || f >= files || seen[f]++;
                owners++;
            }
            loss += layout_counts_loss(&l, l.pp_rank == pp - 1);
            tp_counters += layout_counts_tp_replicated(&l);
            tied_copies += layout_holds_tied_copy(&l, &tied) + layout_holds_tied_copy(&l, &untied);
        }
        bad += owners != files || loss != dp || tp_counters != dp * pp || tied_copies != (pp > 1 ? dp * tp : 0);
        bad += layout_tokens_per_step(&l, 3, 5, 7) != 3.0 * 5 * 7 * dp;
        n++;
    }
    EXPECT(n == 96 && bad == 0, "%d wrong facts over %d layouts", bad, n);
}

// A pipeline of P stages splits, per pipeline, two pairs of splits into
// neighbour pairs (P − 1 pairs and two ranks alone each) and, once per use,
// the two ends against the middle.
static void test_comms(void) {
    Layout l = {.dp = 2, .tp = 1, .pp = 4, .vstages = 2};
    LayoutComm c[LAYOUT_MAX_COMMS];
    int k = layout_comms(&l, 1, c), pairs = 0, alone = 0, ends = 0, middle = 0;
    for (int i = 0; i < k; i++) {
        if (!strcmp(c[i].what, "pipeline neighbour pairs")) pairs = c[i].size == 2 ? c[i].count : -1;
        if (!strcmp(c[i].what, "pipeline ends alone")) alone = c[i].size == 1 ? c[i].count : -1;
        if (!strcmp(c[i].what, "first and last stage")) ends = c[i].count;
        if (!strcmp(c[i].what, "middle stages")) middle = c[i].size == 2 ? c[i].count : -1;
    }
    EXPECT(pairs == 2 * 2 * 3 && alone == 2 * 4 && ends == 2 * 3 && middle == 2 * 3, "pairs %d, alone %d, ends %d, middle %d",
           pairs, alone, ends, middle);
    Layout one = {.dp = 1, .tp = 1, .pp = 1};
    EXPECT(layout_comms(&one, 1, c) == 5, "one process lists the world, statistics and three groups of one");
}

int main(void) {
    RUN(test_groups);
    RUN(test_wrong_size);
    RUN(test_counting);
    RUN(test_comms);
    return test_finish();
}
