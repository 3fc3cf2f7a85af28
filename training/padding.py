"""Right padding of token-id sequences into one batch, as every batched forward pass here feeds the model."""

from __future__ import annotations


def right_padded(sequences: list[list[int]], pad_id: int):
    """(input_ids, attention_mask) of shape (B, T), T the longest sequence: each row its ids, then `pad_id`; the
    mask 1 over the ids and 0 over the padding."""
    import torch

    width = max(len(ids) for ids in sequences)
    input_ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    attention = torch.zeros_like(input_ids)
    for row, ids in enumerate(sequences):
        input_ids[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        attention[row, : len(ids)] = 1
    return input_ids, attention
