"""Per-turn surprisal of LoCoMo dev under the small LM (issue 25 item 1, Selective Context / LLMLingua style).

For every message of every dev conversation (categories 1-4, the order loco_prior_features.py uses): the
mean token NLL of the message line given the previous CONTEXT lines, its max and its top-5 mean. Cached in
$TMPDIR/loco_surprisal.pkl as a list (per conversation) of (n, 3) arrays; loco_prior_features.py reads it.

    HF_HUB_OFFLINE=1 OMP_NUM_THREADS=2 nice -n 10 .venv/bin/python benchmarks/loco_surprisal.py MODEL_DIR [cpu|cuda]

MODEL_DIR: the safetensors copy rdmem.lm makes of the packaged SmolLM2 GGUF (.rdmem-cache/.../lm/SmolLM2-135M-
Instruct.Q4_1; by default ~/.cache/rdmem/lm/...). Cost: 2,093 s for the 3,435 dev turns on the 2-core box (2
threads, niced); a few seconds with cuda where a GPU is lent. Result (BENCHMARKS "Item 1"): no lift, dropped.
"""
import os, sys, time, pickle
import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from rdmem.datasets import load_locomo
from rdmem.lm.model import message_line

PATH = os.environ.get("LOCOMO", "../shared/data/locomo/locomo_dev.json")
OUT = os.path.join(os.environ.get("TMPDIR", "/tmp"), "loco_surprisal.pkl")
CONTEXT, MAXCTX, BATCH = 3, 192, 16

def main(where: str, device: str = "cpu") -> None:
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    tok = AutoTokenizer.from_pretrained(where)
    model = AutoModelForCausalLM.from_pretrained(where, dtype=torch.float32).eval().to(device)
    convs = [c.select([1, 2, 3, 4]) for c in load_locomo(PATH)]
    out, t0 = [], time.time()
    for ci, c in enumerate(convs):
        lines = [message_line(m) for m in c.messages]
        items = []
        for k, line in enumerate(lines):
            ctx = tok("\n".join(lines[max(0, k - CONTEXT):k]) + "\n" if k else "")["input_ids"][-MAXCTX:]
            tgt = tok(line)["input_ids"][:128]
            items.append((ctx, tgt))
        res = np.zeros((len(items), 3))
        order = sorted(range(len(items)), key=lambda i: len(items[i][0]) + len(items[i][1]))
        for b in range(0, len(order), BATCH):
            idx = order[b:b + BATCH]; seqs = [items[i][0] + items[i][1] for i in idx]; L = max(map(len, seqs))
            ids = torch.full((len(seqs), L), tok.eos_token_id or 0); att = torch.zeros((len(seqs), L), dtype=torch.long)
            for r, s in enumerate(seqs): ids[r, :len(s)] = torch.tensor(s); att[r, :len(s)] = 1
            with torch.no_grad():
                lp = torch.log_softmax(model(input_ids=ids.to(device), attention_mask=att.to(device)).logits.float(), -1).cpu()
            for r, i in enumerate(idx):
                nc, nt = len(items[i][0]), len(items[i][1])
                start = max(nc, 1)  # the first token of a context-free turn has no prediction
                pos = torch.arange(start, nc + nt)
                nll = -lp[r, pos - 1, ids[r, pos]].numpy() if len(pos) else np.zeros(1)
                res[i] = [nll.mean(), nll.max(), np.sort(nll)[-5:].mean()]
        out.append(res)
        print(f"conv {ci}: {len(items)} turns, {time.time()-t0:.0f}s", file=sys.stderr, flush=True)
    pickle.dump(out, open(OUT, "wb"))

if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "cpu")
