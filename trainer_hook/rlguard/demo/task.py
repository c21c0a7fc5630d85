"""The generated task: add digits, answer in decimal, end with EOS; the reward is verifiable.

A prompt reads ``BOS a + b =`` and the correct response is the digits of ``a + b`` followed by
``EOS``. The vocabulary also holds junk letters a trained policy should never emit, so a policy
pushed towards uniform breaks the output format visibly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

DIGITS = [str(d) for d in range(10)]
JUNK = list("abcdefghi")
VOCAB = [*DIGITS, "+", "=", "<bos>", "<eos>", "<pad>", *JUNK]
PLUS, EQUALS, BOS, EOS, PAD = (VOCAB.index(t) for t in ("+", "=", "<bos>", "<eos>", "<pad>"))
RESPONSE_LEN = 4  # longest response kept; a response without EOS by then is truncated


@dataclass(frozen=True)
class AdditionTask:
    """Sums of ``operands`` digits, with a fixed held-out set of prompts never trained on."""

    operands: int = 2
    heldout_frac: float = 0.2
    split_seed: int = 1234

    @property
    def prompt_len(self) -> int:
        """Tokens of a prompt: BOS, the digits with the plus signs between them, and '='."""
        return 2 * self.operands + 1

    @property
    def max_sum(self) -> int:
        """The largest sum the operands can make."""
        return 9 * self.operands

    def split(self) -> tuple[torch.Tensor, torch.Tensor]:
        """All operand tuples [N, operands], split into (train, held-out) deterministically."""
        grids = torch.meshgrid(*[torch.arange(10)] * self.operands, indexing="ij")
        every = torch.stack([g.flatten() for g in grids], dim=-1)
        order = torch.randperm(len(every), generator=torch.Generator().manual_seed(self.split_seed))
        n_heldout = int(len(every) * self.heldout_frac)
        return every[order[n_heldout:]], every[order[:n_heldout]]

    def prompt_ids(self, operands: torch.Tensor) -> torch.Tensor:
        """Token ids ``BOS a + b =`` for operand rows [B, operands] -> [B, prompt_len]."""
        parts = [torch.full((len(operands), 1), BOS)]
        for i in range(self.operands):
            sep = PLUS if i < self.operands - 1 else EQUALS
            parts += [operands[:, i : i + 1], torch.full((len(operands), 1), sep)]
        return torch.cat(parts, dim=1)

    def answer_ids(self, sums: torch.Tensor) -> torch.Tensor:
        """Responses ``digits EOS PAD...`` for sums [B] -> [B, RESPONSE_LEN]."""
        out = torch.full((len(sums), RESPONSE_LEN), PAD)
        two_digit = sums >= 10
        out[:, 0] = torch.where(two_digit, sums // 10, sums)
        out[:, 1] = torch.where(two_digit, sums % 10, EOS)
        out[:, 2] = torch.where(two_digit, EOS, PAD)
        return out

    def score(self, responses: torch.Tensor, operands: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """(reward 0/1, format ok 0/1) per response [B, RESPONSE_LEN]."""
        expected = self.answer_ids(operands.sum(-1).to(responses.device))
        correct = (responses == expected).all(-1)
        return correct.float(), format_ok(responses).float()


def format_ok(responses: torch.Tensor) -> torch.Tensor:
    """A response is well formed when it is one or two digits followed by EOS."""
    is_digit = responses < 10
    one = is_digit[:, 0] & (responses[:, 1] == EOS)
    two = is_digit[:, 0] & is_digit[:, 1] & (responses[:, 2] == EOS)
    return one | two


def response_mask(responses: torch.Tensor) -> torch.Tensor:
    """1 on response tokens up to and including the first EOS, 0 after it [B, R]."""
    after_eos = (responses == EOS).long().cumsum(-1) - (responses == EOS).long()
    return (after_eos == 0).float()


def pass_at_k(n: int, c: int, k: int) -> float:
    """Chance that k of n attempts with c correct, drawn without replacement, contain a pass."""
    return 1.0 if n - c < k else 1.0 - math.comb(n - c, k) / math.comb(n, k)
