"""Fully-explored MLM in a plain accelerate training loop: one collator changed.

    python examples/accelerate_fe.py --max-steps 20        # or: accelerate launch examples/accelerate_fe.py
"""

from __future__ import annotations

import torch
from accelerate import Accelerator
from hf_trainer_fe import arguments, blocks_and_model  # the same run_mlm.py data path and tiny model

from femlm import DataCollatorForFullyExploredLM


def main() -> None:
    args = arguments(__doc__)
    tokenizer, blocks, model = blocks_and_model(args)
    collator = DataCollatorForFullyExploredLM(tokenizer, mlm_probability=0.15, num_masks=args.num_masks, seed=0,
                                              strategy=args.strategy)
    blocks = blocks.remove_columns([c for c in blocks.column_names if c not in ("input_ids", "token_type_ids")])
    loader = torch.utils.data.DataLoader(blocks, batch_size=collator.sequences_for(args.rows), shuffle=True,
                                         collate_fn=collator, generator=torch.Generator().manual_seed(0))
    accelerator = Accelerator(cpu=not torch.cuda.is_available())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    accelerator.register_for_checkpointing(collator)  # save_state/load_state keep its epoch and call counter
    model.train()
    losses: list[float] = []
    epoch = 0
    while len(losses) < args.max_steps:
        collator.set_epoch(epoch)  # before iter(loader): new masks every epoch (without it: the same masks)
        epoch += 1
        for batch in loader:
            loss = model(**batch).loss  # the token mean over B*K rows = the mean of the K copies' losses
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss.item())
            if len(losses) == args.max_steps:
                break
    accelerator.print(f"losses per step: {' '.join(f'{x:.4f}' for x in losses)}")


if __name__ == "__main__":
    main()
