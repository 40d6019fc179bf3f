# Sourced by tools/pipe_replay and tools/pipe_timeline: which ranks of fsc-train --trace DIR form one pipeline.
# Each rank's file says where the rank sits (the "process_labels" metadata event of fsc_engine_set_trace,
# docs/observability.md: pp, stage, dp, data, tp, tensor). pipe_layout NAME DIR DATA takes the ranks of data rank
# DATA and tensor rank 0 (the other tensor ranks of a stage run the same actions) and sets
#   $pipe_pp     the trace's pipeline stages (empty: the traces have no labels)
#   $pipe_ranks  the rank of each stage, stage 0 first ("0 2": stage 0 on rank 0, stage 1 on rank 2; empty: none)
#   $pipe_desc   one line for the reader: "pp 2 x dp 2 x tp 1: data rank 0's pipeline, stages 0 1 on ranks 0 2"
#   $pipe_v      chunks per rank (empty: labels written before they said it)
#   $pipe_place  the chunks' placement, loop or v (empty likewise)
# A trace whose layout says pp 1 (DDP, FSDP, ZeRO: their accumulation actions are spans of the same kind) is
# refused with exit 2 (NAME: not a pipeline trace: ...), as is a DATA the layout lacks; layouts that disagree, or a
# stage of that pipeline without a trace, exit 1. Traces without labels (runs before they were written) give
# empty values and a note on stderr: every rank is then taken as a stage, rank r stage r, as these tools did.
# It relies on fsc_trace_write's layout (one event per line).
pipe_layout() {
  pipe_lay=$(cat "$2"/rank-*.json | awk -v tool="$1" -v want="$3" '
    function num(key,   m) {
      if (match($0, "\"" key "\":-?[0-9.eE+-]+")) { m = substr($0, RSTART, RLENGTH); sub(/^[^:]*:/, "", m); return m + 0 }
      return ""
    }
    function str(key,   m) {
      if (match($0, "\"" key "\":\"[a-z]*\"")) { m = substr($0, RSTART, RLENGTH); sub(/^[^:]*:"/, "", m); sub(/"$/, "", m); return m }
      return ""
    }
    /"name":"process_labels"/ && /"ph":"M"/ {
      p = num("pid"); pp[p] = num("pp"); st[p] = num("stage"); dp[p] = num("dp"); da[p] = num("data")
      tp[p] = num("tp"); te[p] = num("tensor"); ch[p] = num("chunks"); pl[p] = str("placement")
      n++ # a rank attached twice: its last event holds
    }
    END {
      if (!n) {
        print tool ": the traces do not say where each rank sits (no process_labels: a run before they were written): the layout is unknown, every rank taken as a pipeline stage (rank r: stage r)" > "/dev/stderr"
        exit 0
      }
      q = ""
      for (p in pp) {
        if (q == "") { q = p; continue }
        if (pp[p] != pp[q] || dp[p] != dp[q] || tp[p] != tp[q] || ch[p] != ch[q] || pl[p] != pl[q]) {
          printf "%s: the ranks disagree on the layout: rank %d says pp %d x dp %d x tp %d (chunks %s %s), rank %d pp %d x dp %d x tp %d (chunks %s %s) (traces of two runs in one directory?)\n", tool, q, pp[q], dp[q], tp[q], ch[q], pl[q], p, pp[p], dp[p], tp[p], ch[p], pl[p] > "/dev/stderr"
          exit 1
        }
      }
      P = pp[q]; D = dp[q]; T = tp[q]
      if (P == 1) {
        printf "%s: not a pipeline trace: its layout is pp 1 x dp %d x tp %d (its F and B spans are a data-parallel run'"'"'s micro-batches, not stages; trace a run with --pp 2 or more)\n", tool, D, T > "/dev/stderr"
        exit 2
      }
      if (want >= D) { printf "%s: --data %d: the trace has data ranks 0 to %d (pp %d x dp %d x tp %d)\n", tool, want, D - 1, P, D, T > "/dev/stderr"; exit 2 }
      for (p in pp) if (da[p] == want && te[p] == 0) of[st[p]] = p
      for (g = 0; g < P; g++)
        if (!(g in of)) { printf "%s: no trace of pipeline stage %d (data rank %d, tensor rank 0) in the directory (pp %d x dp %d x tp %d)\n", tool, g, want, P, D, T > "/dev/stderr"; exit 1 }
      r = ""; s = ""
      for (g = 0; g < P; g++) { r = r (g ? " " : "") of[g]; s = s (g ? " " : "") g }
      printf "%d\n%s\npp %d x dp %d x tp %d: data rank %d'"'"'s pipeline (tensor rank 0), stages %s on ranks %s\n%s\n%s\n", P, r, P, D, T, want, s, r, ch[q], pl[q]
    }') || exit $?
  pipe_pp=$(printf '%s\n' "$pipe_lay" | sed -n 1p)
  pipe_ranks=$(printf '%s\n' "$pipe_lay" | sed -n 2p)
  pipe_desc=$(printf '%s\n' "$pipe_lay" | sed -n 3p)
  pipe_v=$(printf '%s\n' "$pipe_lay" | sed -n 4p)
  pipe_place=$(printf '%s\n' "$pipe_lay" | sed -n 5p)
}
