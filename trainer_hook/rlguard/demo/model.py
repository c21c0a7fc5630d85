"""A small causal transformer policy and its sampler."""

from __future__ import annotations

import torch
from torch import nn

from rlguard.demo.task import EOS, PAD


class Block(nn.Module):
    """Pre-norm causal self-attention and MLP."""

    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, 4 * d_model), nn.ReLU(), nn.Linear(4 * d_model, d_model)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Causal self-attention then the MLP, each with a residual connection."""
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.n_heads, -1).transpose(1, 3).unbind(2)
        # explicit attention: on CPU it beats the fused kernel at these tiny shapes
        scores = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
        future = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        attn = torch.softmax(scores.masked_fill(future, -torch.inf), -1) @ v
        x = x + self.proj(attn.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.norm2(x))


class TinyCausalLM(nn.Module):
    """Token and position embeddings, a few blocks, a tied-free output head."""

    def __init__(self, vocab: int, max_len: int, d_model: int = 64, layers: int = 2) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(max_len, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_heads=4) for _ in range(layers))
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Next-token logits [B, T, V] for ids [B, T]."""
        x = self.tok(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def response_logits(model: nn.Module, ids: torch.Tensor, prompt_len: int) -> torch.Tensor:
    """Logits that predict each response token [B, R, V]."""
    return model(ids[:, :-1])[:, prompt_len - 1 :]


def token_log_probs(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Log-probabilities of the given tokens under the logits [B, R]."""
    return torch.log_softmax(logits.float(), -1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


@torch.no_grad()
def sample(
    model: nn.Module,
    prompts: torch.Tensor,
    length: int,
    generator: torch.Generator,
    temperature: float = 1.0,
) -> torch.Tensor:
    """Sample ``length`` response tokens per prompt; tokens after EOS become PAD -> [B, R]."""
    ids, done = prompts, torch.zeros(len(prompts), dtype=torch.bool, device=prompts.device)
    for _ in range(length):
        probs = torch.softmax(model(ids)[:, -1].float() / temperature, -1)
        token = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
        token = torch.where(done, torch.full_like(token, PAD), token)
        done |= token == EOS
        ids = torch.cat([ids, token.unsqueeze(-1)], dim=1)
        if bool(done.all()):
            break
    responses = ids[:, prompts.shape[1] :]
    padding = responses.new_full((len(responses), length - responses.shape[1]), PAD)
    return torch.cat([responses, padding], dim=1)
