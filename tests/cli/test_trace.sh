#!/usr/bin/env bash
# tessera train --trace: a Chrome trace-event file of the --trace-steps
# steps. It parses as JSON, every event has the fields the format requires,
# the events of one thread never overlap, their durations per kind add up
# to --profile's table for the same steps (within 2%), a 2×2×2 run gives one
# file with 8 pids, bad flags exit 2 with one line, and tracing changes no
# number of the run. Run from the repository root.
source "$(dirname "$0")/lib.sh"
R="train --data $DATA --tokenizer byte --seed 3 --model gpt2-tiny --seq 32 --log-every 1"
PY=/usr/bin/python3

# check TRACE [PROFILE_OUT TABLE PID]: prints "ok", or what is wrong. The
# format's fields (X: ph name cat pid tid ts dur args; M: ph name pid tid
# args); the events of each (pid, tid) one after another; with PROFILE_OUT,
# PID's milliseconds by kind over the traced steps against the TABLE-th
# table's ms/step times its steps (2%, or the table's rounding to 0.01 ms a
# row).
check() {
  "$PY" - "$@" <<'EOF'
import json, re, sys
try:
    doc = json.load(open(sys.argv[1], encoding="utf-8"))
except Exception as e:
    print("not JSON:", e); sys.exit()
ev = doc.get("traceEvents")
if not isinstance(ev, list) or not ev:
    print("no traceEvents"); sys.exit()
need = {"X": {"ph": str, "name": str, "cat": str, "pid": int, "tid": int, "ts": (int, float), "dur": (int, float), "args": dict},
        "M": {"ph": str, "name": str, "pid": int, "tid": int, "args": dict}}
rows = {}
for e in ev:
    f = need.get(e.get("ph"))
    if f is None:
        print("an event of phase", e.get("ph")); sys.exit()
    for k, t in f.items():
        if not isinstance(e.get(k), t):
            print("event without a good", k, e); sys.exit()
    if e["ph"] == "X":
        if e["dur"] < 0 or e["ts"] < 0:
            print("negative time", e); sys.exit()
        rows.setdefault((e["pid"], e["tid"]), []).append(e)
for key, r in rows.items():
    r.sort(key=lambda e: e["ts"])
    for a, b in zip(r, r[1:]):
        if a["ts"] + a["dur"] > b["ts"] + 1e-6:
            print("overlap on pid %d tid %d:" % key, a["name"], a["ts"], a["dur"], "and", b["name"], b["ts"]); sys.exit()
if len(sys.argv) > 2:
    want, pid = int(sys.argv[3]), int(sys.argv[4])
    names = {"gemm fwd": "gemm_fwd", "gemm dinp": "gemm_dinp", "gemm dweight": "gemm_dweight", "attention": "attention",
             "softmax + loss": "softmax_loss", "norms": "norm", "pointwise": "pointwise", "embedding": "embedding",
             "16-bit copies": "half", "queued rows": "queued_rows", "AdamW": "adamw", "grads zero/norm": "grads", "loader wait": "loader",
             "communication": "comm", "checkpoint I/O": "ckpt"}
    table, nrows, steps, n = {}, {}, 0, 0
    for line in open(sys.argv[2], encoding="utf-8"):
        if line.startswith("profile:"):
            n += 1
            if n == want:
                steps = int(re.search(r"mean of (\d+) step", line).group(1))
            continue
        if n != want or not line.startswith("  "):
            continue
        for name in sorted(names, key=len, reverse=True):
            if line.startswith("  " + name + " "):
                f = line.split()
                share = next(i for i, x in enumerate(f) if x.endswith("%"))
                k = names[name]
                table[k] = table.get(k, 0.0) + float(f[share - 1])
                nrows[k] = nrows.get(k, 0) + 1
                break
    traced = {}
    for e in ev:
        if e["ph"] == "X" and e["pid"] == pid and e["cat"] != "step":
            traced[e["cat"]] = traced.get(e["cat"], 0.0) + e["dur"] / 1e3 / steps
    if not table or steps < 1:
        print("no profile table"); sys.exit()
    for k in sorted(set(table) | set(traced)):
        t, p = traced.get(k, 0.0), table.get(k, 0.0)
        if abs(t - p) > max(0.02 * p, 0.005 * nrows.get(k, 1) + 0.002):
            print("pid %d, kind %s: %.3f ms/step traced, %.3f in the table" % (pid, k, t, p)); sys.exit()
print("ok")
EOF
}
# field_of TRACE EXPR: a Python expression of the parsed file d
field_of() { "$PY" -c "import json, sys; d = json.load(open(sys.argv[1])); print($2)" "$1" 2>&1; }

# ---- one process, the profile alongside, a checkpoint at the end ----
"$BIN" $R --batch 4 --threads 2 --steps 3 --profile --trace "$TMP/t.json" --trace-steps 2:3 --log "$TMP/t.jsonl" \
  --ckpt-dir "$TMP/t" >"$TMP/t.out" 2>&1 || echo "     $(tail -1 "$TMP/t.out")"
c=$(check "$TMP/t.json")
[ "$c" = ok ] && grep -q "^trace:     $TMP/t.json: [0-9]* events of 1 rank, steps 2:3 " "$TMP/t.out" &&
  ok "the file parses as JSON, every event has the format's fields, one thread's events never overlap" || bad "trace format" "$c"
c=$(check "$TMP/t.json" "$TMP/t.out" 1 0)
[ "$c" = ok ] && ok "its milliseconds by kind add up to --profile's table for the same steps (within 2%)" ||
  bad "trace against the profile" "$c" "$(grep -A30 '^profile' "$TMP/t.out" | head -30)"
k=$(field_of "$TMP/t.json" "' '.join(sorted({e['cat'] for e in d['traceEvents'] if e['ph'] == 'X'}))")
s=$(field_of "$TMP/t.json" "sorted({e['args']['step'] for e in d['traceEvents'] if e['ph'] == 'X'})")
l=$(field_of "$TMP/t.json" "sorted({e['args'].get('layer', -1) for e in d['traceEvents'] if e.get('cat') == 'gemm_fwd'})")
g=$(field_of "$TMP/t.json" "[e['args']['shape'] for e in d['traceEvents'] if e.get('cat') == 'gemm_fwd' and e['args'].get('layer') == 2][0]")
for kind in attention ckpt embedding gemm_dinp gemm_dweight gemm_fwd loader norm pointwise softmax_loss step; do
  case " $k " in *" $kind "*) ;; *) k="missing $kind in: $k" ;; esac
done
[ "$s" = "[2, 3]" ] && [ "$l" = "[-1, 0, 1, 2, 3]" ] && [ "$g" = "128×128 · 128×384" ] && [ "${k#missing}" = "$k" ] &&
  ok "events of steps 2 and 3 only: kernels by kind, layer (0-3, the head none) and GEMM shape, the steps, checkpoint I/O" ||
  bad "trace contents" "steps $s; layers $l; shape $g" "$k"
# tracing and profiling change nothing the run computes
"$BIN" $R --batch 4 --threads 2 --steps 3 --log "$TMP/n.jsonl" --ckpt-dir "$TMP/n" >"$TMP/n.out" 2>&1
same_bits "$TMP/t" "$TMP/n" && losses_match "$TMP/t.jsonl" "$TMP/n.jsonl" && ! grep -q "^trace:" "$TMP/n.out" &&
  ok "a run with --trace ends with the same checkpoint bits; without it, no file" || bad "--trace changes the run"

# ---- 2×2×2: one file, a pid per rank, collectives with their groups ----
"$BIN" $R --batch 1 --steps 3 --nproc 8 --dp 2 --tp 2 --pp 2 --micro-batches 2 --profile --trace "$TMP/m.json" \
  >"$TMP/m.out" 2>&1 || echo "     $(tail -1 "$TMP/m.out")"
c=$(check "$TMP/m.json")
p=$(field_of "$TMP/m.json" "sorted({e['pid'] for e in d['traceEvents']})")
n=$(field_of "$TMP/m.json" "[e['args']['name'] for e in d['traceEvents'] if e['name'] == 'process_name' and e['pid'] == 5][0]")
g=$(field_of "$TMP/m.json" "' '.join(sorted({e['args']['group'] for e in d['traceEvents'] if e.get('cat') == 'comm'}))")
l=$(field_of "$TMP/m.json" "sorted({e['args'].get('layer', -1) for e in d['traceEvents'] if e.get('cat') == 'gemm_fwd' and e['pid'] == 6})")
b=$(field_of "$TMP/m.json" "all(e['args']['bytes'] > 0 for e in d['traceEvents'] if e.get('cat') == 'comm' and e['args']['op'] != 'barrier')")
st=$(field_of "$TMP/m.json" "d['otherData']['steps']")
[ "$c" = ok ] && [ "$p" = "[0, 1, 2, 3, 4, 5, 6, 7]" ] && [ "$n" = "rank 5 (dp 0 tp 1 pp 1)" ] && [ "$l" = "[-1, 2, 3]" ] &&
  [ "$b" = True ] && [ "$st" = "2:3" ] && for grp in dp pp_act pp_grad tp; do case " $g " in *" $grp "*) ;; *) false ;; esac; done &&
  ok "--nproc 8, 2×2×2: one file with 8 pids named by rank and place, stage 1's layers 2-3, tp/dp/pipeline groups with bytes; default steps 2:3" ||
  bad "2×2×2 trace" "$c" "pids $p; pid 5: $n; groups $g; pid 6 layers $l; bytes $b; steps $st"

c=$(check "$TMP/m.json" "$TMP/m.out" 1 0) && [ "$c" = ok ] && c=$(check "$TMP/m.json" "$TMP/m.out" 2 4)
[ "$c" = ok ] && ok "2×2×2: ranks 0 and 4 (the two stages' tables) add up to their --profile tables by kind (within 2%)" ||
  bad "2×2×2 trace against the profile" "$c" "$(grep -A30 '^profile' "$TMP/m.out" | head -60)"

# ---- a rank's cap (the test hook lowers it): the file says what was left out ----
TESSERA_TEST_TRACE_CAP=40 "$BIN" $R --batch 2 --steps 2 --nproc 2 --tp 2 --trace "$TMP/c.json" >"$TMP/c.out" 2>&1 ||
  echo "     $(tail -1 "$TMP/c.out")"
c=$(check "$TMP/c.json")
h=$(field_of "$TMP/c.json" "[sum(e['ph'] == 'X' and e['pid'] == p for e in d['traceEvents']) for p in (0, 1)], d['otherData']['dropped_events'] > 0, 'left out' in d['otherData']['note']")
[ "$c" = ok ] && [ "$h" = "[40, 40] True True" ] &&
  grep -q "^trace:     [0-9]* events past the cap of 40 per rank were left out (rank 0 first): trace fewer steps" "$TMP/c.out" &&
  ok "past a rank's cap: its first events kept, the rest counted in otherData with a note and on the terminal" ||
  bad "trace cap" "$c; $h" "$(grep '^trace' "$TMP/c.out")"

# ---- what is refused: one line, exit 2 ----
refused() {   # refused NAME EXPECT FLAGS...: exit 2 and one line holding EXPECT
  local name=$1 want=$2; shift 2
  "$BIN" $R --batch 2 --steps 3 "$@" >"$TMP/e.out" 2>"$TMP/e.err"
  local rc=$?
  [ $rc = 2 ] && [ "$(wc -l <"$TMP/e.err")" = 1 ] && grep -q -- "$want" "$TMP/e.err" && ok "$name" ||
    bad "$name" "exit $rc" "$(cat "$TMP/e.err")"
}
refused "--trace-steps 3:2 refused" "--trace-steps '3:2': expected A:B" --trace "$TMP/x.json" --trace-steps 3:2
refused "--trace-steps 0:1 refused" "--trace-steps '0:1'" --trace "$TMP/x.json" --trace-steps 0:1
refused "--trace-steps past --steps refused" "<= --steps 3" --trace "$TMP/x.json" --trace-steps 2:4
refused "--trace-steps 2 refused" "--trace-steps '2'" --trace "$TMP/x.json" --trace-steps 2
refused "--trace-steps '2: 3' refused" "--trace-steps '2: 3'" --trace "$TMP/x.json" --trace-steps "2: 3"
refused "--trace-steps without --trace refused" "--trace-steps needs --trace" --trace-steps 1:2
refused "--trace into a missing directory refused" "--trace $TMP/no/x.json: cannot write a file there (No such file" \
  --trace "$TMP/no/x.json"
refused "--trace onto a directory refused" "--trace $TMP: not a regular file" --trace "$TMP"
refused "--trace-steps before the resumed step refused" "--trace-steps 2:3: the run continues from step 3" \
  --resume "$TMP/t" --steps 4 --trace "$TMP/x.json" --trace-steps 2:3
[ ! -e "$TMP/x.json" ] && ok "no file is left by a refused run" || bad "a refused run left $TMP/x.json"
"$BIN" $R --batch 4 --threads 2 --resume "$TMP/t" --steps 4 --trace "$TMP/r.json" --trace-steps 3:4 >"$TMP/r.out" 2>&1
[ "$(field_of "$TMP/r.json" "sorted({e['args']['step'] for e in d['traceEvents'] if e['ph'] == 'X'})")" = "[4]" ] &&
  grep -q "^trace:     $TMP/r.json: [0-9]* events of 1 rank, steps 4:4 " "$TMP/r.out" &&
  ok "a run resumed at step 3 traces what it does of --trace-steps 3:4: step 4" || bad "resumed trace" "$(tail -2 "$TMP/r.out")"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
