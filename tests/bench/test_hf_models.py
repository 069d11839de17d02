"""The KV cache's keyword: a baseline that passed it under the wrong name would run without its
context (the forward's **kwargs swallows it), so the keyword is read from the signature."""

from transformers import Qwen2Config, Qwen2Model

from voxbench.hf_models import cache_keyword, cache_kwargs, output_cache


class _Before:  # transformers before 5.24
    def forward(self, inputs_embeds=None, past_key_values=None, use_cache=None, **kwargs): ...


class _After:
    def forward(self, inputs_embeds=None, cache=None, use_cache=None, **kwargs): ...


def test_the_keyword_follows_the_forwards_signature():
    assert cache_keyword(_Before()) == "past_key_values"
    assert cache_keyword(_After()) == "cache"
    assert cache_kwargs(_After(), "c") == {"cache": "c"}


def test_the_installed_transformers_takes_the_cache_it_is_given():
    import torch

    config = Qwen2Config(
        vocab_size=32,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
    )
    torch.manual_seed(0)
    lm = Qwen2Model(config).eval()
    x = torch.randn(1, 5, 16)
    with torch.no_grad():
        whole = lm(inputs_embeds=x).last_hidden_state[0, -1]
        first = lm(inputs_embeds=x[:, :4], use_cache=True)
        last = lm(inputs_embeds=x[:, 4:], use_cache=True, **cache_kwargs(lm, output_cache(first)))
    torch.testing.assert_close(last.last_hidden_state[0, -1], whole, rtol=1e-4, atol=1e-5)
