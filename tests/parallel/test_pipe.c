// parallel/pipe's schedules, run on paper: for every P, V and M a test
// can name, each stage's operation list does every forward and backward
// once, each chunk's micro-batches in order (so gradients accumulate in
// the one-process order); the ranks, blocking only on receives as
// parallel/pipe does, never deadlock, and every neighbour channel carries
// its messages in the order the receiver expects them; the activations in
// flight are what parallel/layout's layout_in_flight says (P − r under 1F1B, M under GPipe,
// 2(P − r − 1) + (V − 1)·P + 1 chunks interleaved, at most V·M); with
// sends that complete only as the receiver takes them (rendezvous), the
// gradient send buffers pipe_grad_buffers counts keep every rank from
// waiting on a send it must itself unblock, whichever ranks run ahead;
// and with a forward taking 1 and a backward 2 time units per chunk, the
// step takes exactly (V·M + P − 1)·3/V: the bubble (P − 1)/(V·M + P − 1)
// the planner and the summary print. Then the layout's layer split and
// slices: chunks P apart, and the errors.
#include <string.h>

#include "parallel/pipe.h"
#include "test.h"

enum { MAXP = 8, MAXV = 4, MAXM = 24, MAXOPS = 2 * MAXV * MAXM };

typedef struct {
    int P, V, M;
    PipeSchedule s;
    PipeOp ops[MAXP][MAXOPS];
    int nops[MAXP];
} Plan;

// Virtual stage of rank r's chunk v, and back.
static int vstage(const Plan *p, int r, int v) { return v * p->P + r; }

// Runs every rank's list with a forward taking 1 and a backward 2 units of
// time per chunk, each operation waiting for the message it receives (the
// producing operation finished); returns the step's length in units of
// 1/V, or -1 on a deadlock. Checks each channel's order on the way.
static long simulate(Plan *p, int *order_bad) {
    static long fin[2][MAXP * MAXV][MAXM];   // finish time of (bwd, virtual stage, mb); -1: not yet
    int P = p->P, V = p->V, idx[MAXP] = {0};
    long t[MAXP] = {0};
    for (int b = 0; b < 2; b++)
        for (int j = 0; j < P * V; j++)
            for (int m = 0; m < p->M; m++) fin[b][j][m] = -1;
    // each channel (sender virtual stage parity aside: per sending rank and
    // direction) keeps the micro-batches sent, the receiver checks it takes
    // them in that order
    static int sent[2][MAXP][MAXOPS], nsent[2][MAXP], taken[2][MAXP];
    memset(nsent, 0, sizeof nsent);
    memset(taken, 0, sizeof taken);
    for (int progress = 1; progress;) {
        progress = 0;
        for (int r = 0; r < P; r++)
            while (idx[r] < p->nops[r]) {
                PipeOp o = p->ops[r][idx[r]];
                int j = vstage(p, r, o.chunk), from = -1, dir = o.bwd;
                long ready = 0;
                if (!o.bwd && j > 0) from = j - 1;
                if (o.bwd && j < P * V - 1) from = j + 1;
                if (o.bwd && j == P * V - 1) ready = fin[0][j][o.mb];   // its own forward
                if (from >= 0) {
                    if (fin[dir][from][o.mb] < 0) break;
                    ready = fin[dir][from][o.mb];
                    int sr = from % P;   // the sending rank: its channel to this rank in this direction
                    *order_bad += taken[dir][sr] >= nsent[dir][sr] ||
                                  sent[dir][sr][taken[dir][sr]] != o.chunk * MAXM + o.mb;
                    taken[dir][sr]++;
                }
                if (ready < 0) break;
                long start = t[r] > ready ? t[r] : ready;
                t[r] = start + (o.bwd ? 2 : 1);
                fin[dir][j][o.mb] = t[r];
                // what it sends, tagged with the receiver's chunk
                int to = o.bwd ? j - 1 : j + 1;
                if (to >= 0 && to < P * V) sent[dir][r][nsent[dir][r]++] = (to / P) * MAXM + o.mb;
                idx[r]++;
                progress = 1;
            }
    }
    long span = 0;
    for (int r = 0; r < P; r++) {
        if (idx[r] < p->nops[r]) return -1;
        if (t[r] > span) span = t[r];
    }
    return span;
}

// Runs the ranks as parallel/pipe does with sends that complete only when
// the receiver takes them: a rank's gradient goes through the oldest of
// its pipe_grad_buffers buffers, and the rank waits until that buffer's
// previous send has been taken. Ranks take turns in `order`, each running
// as far as it can (so some run far ahead of slow receivers). 1 if every
// rank finishes, 0 on a deadlock.
static int rendezvous_run(const Plan *p, const int *order) {
    int P = p->P, V = p->V, idx[MAXP] = {0}, K[MAXP], used[MAXP] = {0};
    static int taken_at[MAXP][MAXOPS];   // per buffer in use: the receiving stage's operation that takes its send
    static int at[MAXP][2][MAXV][MAXM];
    for (int r = 0; r < P; r++) {
        K[r] = pipe_grad_buffers(p->s, P, r, p->M, V);
        for (int i = 0; i < p->nops[r]; i++) at[r][p->ops[r][i].bwd][p->ops[r][i].chunk][p->ops[r][i].mb] = i;
    }
    for (int progress = 1; progress;) {
        progress = 0;
        for (int t = 0; t < P; t++) {
            int r = order[t];
            while (idx[r] < p->nops[r]) {
                PipeOp o = p->ops[r][idx[r]];
                int j = vstage(p, r, o.chunk), from = o.bwd ? j + 1 : j - 1;
                if (from >= 0 && from < P * V && idx[from % P] <= at[from % P][o.bwd][from / P][o.mb]) break;
                if (o.bwd && j > 0) {   // its gradient goes back through buffer used % K
                    int q = (j - 1) % P, b = used[r] % K[r];
                    if (used[r] >= K[r] && idx[q] <= taken_at[r][b]) break;   // the buffer's last send not taken yet
                    taken_at[r][b] = at[q][1][(j - 1) / P][o.mb];
                    used[r]++;
                }
                idx[r]++;
                progress = 1;
            }
        }
    }
    for (int r = 0; r < P; r++)
        if (idx[r] < p->nops[r]) return 0;
    return 1;
}

static void check_plan(int P, int V, int M, PipeSchedule s, int *bad_cover, int *bad_order, int *bad_flight,
                       int *deadlocks, int *bad_bubble) {
    static Plan p;
    p.P = P;
    p.V = V;
    p.M = M;
    p.s = s;
    for (int r = 0; r < P; r++) {
        p.nops[r] = pipe_schedule(s, P, r, M, V, p.ops[r]);
        // every (chunk, mb) forward once, backward once after it, each
        // chunk's micro-batches in order; the largest number held
        int fwd[MAXV] = {0}, bwd[MAXV] = {0}, held = 0, most = 0;
        *bad_cover += p.nops[r] != 2 * M * V;
        for (int i = 0; i < p.nops[r]; i++) {
            PipeOp o = p.ops[r][i];
            if (o.chunk < 0 || o.chunk >= V) { (*bad_cover)++; continue; }
            if (!o.bwd) *bad_order += o.mb != fwd[o.chunk]++;
            else *bad_order += o.mb != bwd[o.chunk]++ || bwd[o.chunk] > fwd[o.chunk];
            held += o.bwd ? -1 : 1;
            if (held > most) most = held;
        }
        for (int v = 0; v < V; v++) *bad_cover += fwd[v] != M || bwd[v] != M;
        // interleaved: the warm-up forwards and one more (the planner's count for stage 0)
        int ahead = 2 * (P - r - 1) + (V - 1) * P + 1;
        int want = s == PIPE_GPIPE ? M : V == 1 ? (P - r < M ? P - r : M) : (ahead < V * M ? ahead : V * M);
        Layout l = {.dp = 1, .tp = 1, .pp = P, .vstages = V, .schedule = s};
        *bad_flight += most != layout_in_flight(&l, M, r) || most != want;
    }
    // sends taken only by the receiver: every rank in front of the others,
    // in turn, and the two orders of all
    int order[MAXP];
    for (int first = 0; first < P; first++) {
        for (int k = 0; k < P; k++) order[k] = (first + k) % P;
        *deadlocks += !rendezvous_run(&p, order);
        for (int k = 0; k < P; k++) order[k] = (first + P - k) % P;
        *deadlocks += !rendezvous_run(&p, order);
    }
    int order_bad = 0;
    long span = simulate(&p, &order_bad);
    *bad_order += order_bad;
    if (span < 0) { (*deadlocks)++; return; }
    // 1F1B and its interleaving: exactly the planned bubble; GPipe at least as long
    long want = (long)(V * M + P - 1) * 3;
    if (s == PIPE_1F1B) *bad_bubble += span != want;
    else *bad_bubble += span < want;
}

static void test_schedules(void) {
    int cover = 0, order = 0, flight = 0, dead = 0, bubble = 0, n = 0;
    for (int P = 1; P <= MAXP; P++)
        for (int V = 1; V <= MAXV; V++)
            for (int M = 1; M <= MAXM; M++)
                for (int s = 0; s < 2; s++) {
                    if (pipe_check((PipeSchedule)s, P, M, V, NULL, NULL)) continue;
                    check_plan(P, V, M, (PipeSchedule)s, &cover, &order, &flight, &dead, &bubble);
                    n++;
                }
    EXPECT(n > 300, "only %d schedules checked", n);
    EXPECT(cover == 0, "%d operation lists miss or repeat an operation", cover);
    EXPECT(order == 0, "%d times a chunk's micro-batches or a channel's messages came out of order", order);
    EXPECT(flight == 0, "%d stages hold another number of micro-batches than layout_in_flight says", flight);
    EXPECT(dead == 0, "%d schedules deadlock", dead);
    EXPECT(bubble == 0, "%d schedules take another time than (V·M + P − 1)·(f + b)/V", bubble);
}

// Interleaving holds P − 1 bubble slots of a chunk rather than of a stage:
// pipe_bubble says so, and halves with V = 2 at large M.
static void test_bubble(void) {
    EXPECT(fabs(pipe_bubble(2, 8, 1) - 1.0 / 9) < 1e-15, "P=2 M=8: %g", pipe_bubble(2, 8, 1));
    EXPECT(fabs(pipe_bubble(4, 8, 2) - 3.0 / 19) < 1e-15, "P=4 M=8 V=2: %g", pipe_bubble(4, 8, 2));
    EXPECT(pipe_bubble(1, 4, 1) == 0, "one stage has no bubble");
}

static void test_split(void) {
    Err e;
    int begin[17];
    ModelSlice s = {0};
    ModelConfig mc = {.n_layer = 8};
    Layout l = {.dp = 1, .tp = 1, .pp = 2, .vstages = 2};
    EXPECT(layout_split_layers(&l, 8, begin, &e) == 0, "%s", e.msg);
    EXPECT(layout_slice_of(&l, &mc, 1, 0, &s, &e) == 0, "%s", e.msg);
    int b0, e0, b1, e1;
    slice_chunk_layers(&s, 0, &b0, &e0);
    slice_chunk_layers(&s, 1, &b1, &e1);
    EXPECT(slice_chunks(&s) == 2 && b0 == 2 && e0 == 4 && b1 == 6 && e1 == 8, "stage 1 of 2 with 2 chunks of 8 layers: "
           "%d–%d and %d–%d", b0, e0, b1, e1);
    EXPECT(!slice_is_first(&s), "stage 1 is not the first");
    layout_slice_of(&l, &mc, 0, 0, &s, &e);
    EXPECT(slice_is_first(&s), "stage 0 is the first");
    int layers[2] = {3, 5};
    Layout given = {.dp = 1, .tp = 1, .pp = 2, .pp_layers = layers};
    EXPECT(layout_split_layers(&given, 8, begin, &e) == 0 && begin[1] == 3 && begin[2] == 8, "--pp-layers 3,5");
    EXPECT(layout_split_layers(&l, 6, begin, &e) == -1 && strstr(e.msg, "2 × --pp 2 = 4 chunks do not divide"),
           "%s", e.msg);
    EXPECT(pipe_check(PIPE_1F1B, 2, 4, 2, layers, &e) == -1 && strstr(e.msg, "--pp-layers"), "%s", e.msg);
    EXPECT(pipe_check(PIPE_1F1B, 2, 6, 3, NULL, &e) == 0, "M = 6 on P = 2");
    EXPECT(pipe_check(PIPE_1F1B, 4, 6, 2, NULL, &e) == -1 && strstr(e.msg, "not a multiple of --pp 4"), "%s", e.msg);
    EXPECT(pipe_check(PIPE_GPIPE, 2, 4, 2, NULL, &e) == -1 && strstr(e.msg, "--schedule gpipe"), "%s", e.msg);
    EXPECT(pipe_check(PIPE_1F1B, 1, 4, 2, NULL, &e) == -1 && strstr(e.msg, "--pp 2 or more"), "%s", e.msg);
    EXPECT(pipe_check(PIPE_1F1B, 4, 2, 1, NULL, &e) == -1 && strstr(e.msg, "below --pp 4"), "%s", e.msg);
}

int main(void) {
    RUN(test_schedules);
    RUN(test_bubble);
    RUN(test_split);
    return test_finish();
}
