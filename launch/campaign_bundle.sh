#!/usr/bin/env bash
# Packs what a GPU host or a TPU VM needs to run the paper-size campaign
# (configs/sweeps/p1_paper_size.py, p1_sizes.py) with no network: the package, scripts,
# configs and launchers, the campaign's results directories (its tokenizer, the corpus
# manifest and every point finished so far) and the xz'd corpus, as data/debian_docs_en.txt.xz.
#   bash launch/campaign_bundle.sh /tmp/p1.tar [CORPUS]   # CORPUS: data/debian_docs_en.txt.xz
# On the host: tar -xf p1.tar && pip install -e '.[train,analysis,cuda13]' (or tpu), then the sweep
# commands of docs/research_tools.md; bring back docs/sweeps/p1_*/points/*/result.json.
set -euo pipefail
if [[ ${1:-} == -h || ${1:-} == --help ]]; then
  sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
out=${1:?usage: bash launch/campaign_bundle.sh OUT.tar [CORPUS]}
corpus=${2:-data/debian_docs_en.txt.xz}
out=$(realpath -m "$out")
corpus=$(realpath -m "$corpus")
cd "$(dirname "$0")/.."
results=docs/sweeps/p1_paper_size
sizes=docs/sweeps/p1_sizes
if [[ ! -f $corpus ]]; then
  echo "campaign_bundle: no corpus at $corpus; make it first (configs/sweeps/p1_paper_size.py" \
       "gives the two commands)." >&2
  exit 1
fi
if [[ ! -f $results/tokenizer.model ]]; then
  echo "campaign_bundle: no $results/tokenizer.model; the campaign's tokenizer is committed" \
       "there (git checkout it)." >&2
  exit 1
fi
# NUL-separated (any name), each file once: the tracked files present and every finished point.
mapfile -d '' files < <({ git ls-files -z -- setup.py README.md transformer scripts configs \
                            launch "$results" "$sizes"
                          find "$results/points" "$sizes/points" -name result.json -print0 \
                            2>/dev/null || true; } |
                        sort -zu)
present=()
for f in "${files[@]}"; do [[ -f $f ]] && present+=("$f"); done
tar -cf "$out" -- "${present[@]}"
tar -rf "$out" -C "$(dirname "$corpus")" --transform 's|.*|data/debian_docs_en.txt.xz|' \
  -- "$(basename "$corpus")"
echo "campaign_bundle: ${#present[@]} files and the corpus -> $out ($(du -h "$out" | cut -f1))"
