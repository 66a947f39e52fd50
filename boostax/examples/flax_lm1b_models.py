# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Flax lm1b's ``models.py`` and ``temperature_sampler.py``, for flax_lm1b.

google/flax ``examples/lm1b`` at commit
0e5fc04018f1a20bdf32e9868c6a9eda38407424: ``TransformerConfig`` (with its
``deterministic`` and ``decode`` fields), ``TransformerLM``, which shifts
its inputs right itself and takes a packed batch's positions and segments,
and the temperature sampler that decodes from the ``cache`` collection.
The params carry ``nn.with_logical_partitioning`` annotations, as the
example's later ``models.py`` does, only with ``logical_axes=True`` (the
pmapped ``train.py`` of `boostax.examples.flax_lm1b` replicates them):
kernels and biases named ``embed``, ``mlp``, ``heads``, ``kv`` and
``vocab`` (`LOGICAL_AXIS_RULES` maps them onto a ``data`` x ``model``
mesh); ``temperature_sample`` indexes the sampled token as
``next_token[:, None]`` where the example writes ``next_token[None]``
(which broadcasts a batch of more than one prompt to a square). The rest
is the example's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
import numpy as np
from flax import linen as nn
from flax import struct
from jax import lax, random

# ---------------------------------------------------------------------------
# models.py
# ---------------------------------------------------------------------------


@struct.dataclass
class TransformerConfig:
    """Global hyperparameters used to minimize obnoxious kwarg plumbing."""

    vocab_size: int
    output_vocab_size: int
    share_embeddings: bool = False
    logits_via_embedding: bool = False
    dtype: Any = jnp.float32
    emb_dim: int = 512
    num_heads: int = 8
    num_layers: int = 6
    qkv_dim: int = 512
    mlp_dim: int = 2048
    max_len: int = 2048
    dropout_rate: float = 0.1
    attention_dropout_rate: float = 0.1
    deterministic: bool = False
    decode: bool = False
    kernel_init: Callable = nn.initializers.xavier_uniform()
    bias_init: Callable = nn.initializers.normal(stddev=1e-6)
    posemb_init: Callable | None = None
    # boostax: annotate the params with logical axes (see the module).
    logical_axes: bool = False


# A data x model mesh (tensor parallelism): the batch over 'data', the
# MLP's hidden units, the heads and the vocabulary over 'model'.
LOGICAL_AXIS_RULES = (
    ("batch", "data"),
    ("mlp", "model"),
    ("heads", "model"),
    ("vocab", "model"),
    ("embed", None),
    ("kv", None),
)


def _named(config: TransformerConfig, init: Callable, names) -> Callable:
    """`init` annotated with logical axis `names` where the config asks."""
    if not config.logical_axes:
        return init
    return nn.with_logical_partitioning(init, names)


def shift_right(x, axis=1):
    """Shift the input to the right by padding and slicing on axis."""
    pad_widths = [(0, 0)] * len(x.shape)
    pad_widths[axis] = (1, 0)
    padded = jnp.pad(
        x, pad_widths, mode="constant", constant_values=x.dtype.type(0)
    )
    return lax.dynamic_slice_in_dim(padded, 0, padded.shape[axis] - 1, axis)


def shift_inputs(x, segment_ids=None, axis=1):
    """Shift inputs and replace EOS by 0 for packed inputs."""
    shifted = shift_right(x, axis=axis)
    # For packed targets, the first shifted token of a new sequence is made
    # 0, rather than being the EOS token for the last sequence.
    if segment_ids is not None:
        shifted *= segment_ids == shift_right(segment_ids, axis=axis)
    return shifted


def sinusoidal_init(max_len=2048, min_scale=1.0, max_scale=10000.0):
    """1D Sinusoidal Position Embedding Initializer."""

    def init(key, shape, dtype=np.float32):
        """Sinusoidal init."""
        del key, dtype
        d_feature = shape[-1]
        pe = np.zeros((max_len, d_feature), dtype=np.float32)
        position = np.arange(0, max_len)[:, np.newaxis]
        scale_factor = -np.log(max_scale / min_scale) / (d_feature // 2 - 1)
        div_term = min_scale * np.exp(
            np.arange(0, d_feature // 2) * scale_factor
        )
        pe[:, : d_feature // 2] = np.sin(position * div_term)
        pe[:, d_feature // 2 : 2 * (d_feature // 2)] = np.cos(
            position * div_term
        )
        pe = pe[np.newaxis, :, :]  # [1, max_len, d_feature]
        return jnp.array(pe)

    return init


class AddPositionEmbs(nn.Module):
    """Adds (optionally learned) positional embeddings to the inputs."""

    config: TransformerConfig
    decode: bool = False

    @nn.compact
    def __call__(self, inputs, inputs_positions=None):
        config = self.config
        # inputs.shape is (batch_size, seq_len, emb_dim)
        assert inputs.ndim == 3, (
            f"Number of dimensions should be 3, but it is: {inputs.ndim}"
        )
        length = inputs.shape[1]
        pos_emb_shape = (1, config.max_len, inputs.shape[-1])
        if config.posemb_init is None:
            # Use a fixed (non-learned) sinusoidal position embedding.
            pos_embedding = sinusoidal_init(max_len=config.max_len)(
                None, pos_emb_shape, None
            )
        else:
            pos_embedding = self.param(
                "pos_embedding", config.posemb_init, pos_emb_shape
            )
        pe = pos_embedding[:, :length, :]

        # We use a cache position index for tracking decoding position.
        if self.decode:
            is_initialized = self.has_variable("cache", "cache_index")
            cache_index = self.variable(
                "cache", "cache_index", lambda: jnp.array(0, dtype=jnp.uint32)
            )
            if is_initialized:
                i = cache_index.value
                cache_index.value = i + 1
                _, _, df = pos_embedding.shape
                pe = lax.dynamic_slice(
                    pos_embedding, jnp.array((0, i, 0)), (1, 1, df)
                )
        if inputs_positions is None:
            # normal unpacked case:
            return inputs + pe
        else:
            # for packed data we need to use known position indices:
            return inputs + jnp.take(pe[0], inputs_positions, axis=0)


class MlpBlock(nn.Module):
    """Transformer MLP / feed-forward block."""

    config: TransformerConfig
    out_dim: int | None = None

    @nn.compact
    def __call__(self, inputs):
        config = self.config
        actual_out_dim = (
            inputs.shape[-1] if self.out_dim is None else self.out_dim
        )
        x = nn.Dense(
            config.mlp_dim,
            dtype=config.dtype,
            kernel_init=_named(config, config.kernel_init, ("embed", "mlp")),
            bias_init=_named(config, config.bias_init, ("mlp",)),
        )(inputs)
        x = nn.relu(x)
        x = nn.Dropout(rate=config.dropout_rate)(
            x, deterministic=config.deterministic
        )
        output = nn.Dense(
            actual_out_dim,
            dtype=config.dtype,
            kernel_init=_named(config, config.kernel_init, ("mlp", "embed")),
            bias_init=_named(config, config.bias_init, ("embed",)),
        )(x)
        output = nn.Dropout(rate=config.dropout_rate)(
            output, deterministic=config.deterministic
        )
        return output


class EncoderDecoder1DBlock(nn.Module):
    """Transformer encoder-decoder layer."""

    config: TransformerConfig

    @nn.compact
    def __call__(self, inputs, decoder_mask=None, encoder_decoder_mask=None):
        config = self.config

        # Decoder block.
        assert inputs.ndim == 3
        x = nn.LayerNorm(dtype=config.dtype)(inputs)
        x = nn.SelfAttention(
            num_heads=config.num_heads,
            dtype=config.dtype,
            qkv_features=config.qkv_dim,
            kernel_init=_named(
                config, config.kernel_init, ("embed", "heads", "kv")
            ),
            out_kernel_init=_named(
                config, config.kernel_init, ("heads", "kv", "embed")
            ),
            bias_init=config.bias_init,
            use_bias=False,
            broadcast_dropout=False,
            dropout_rate=config.attention_dropout_rate,
            deterministic=config.deterministic,
            decode=config.decode,
        )(x, decoder_mask)
        x = nn.Dropout(rate=config.dropout_rate)(
            x, deterministic=config.deterministic
        )
        x = x + inputs

        # MLP block.
        z = nn.LayerNorm(dtype=config.dtype)(x)
        z = MlpBlock(config=config)(z)

        return x + z


class Decoder(nn.Module):
    """Transformer Model Decoder for sequence to sequence translation."""

    config: TransformerConfig
    shared_embedding: Any = None

    @nn.compact
    def __call__(
        self,
        inputs,
        inputs_positions=None,
        inputs_segmentation=None,
        decoder_mask=None,
        encoder_decoder_mask=None,
    ):
        config = self.config
        assert inputs.ndim == 2  # (batch, len)

        # Target Embedding
        if self.shared_embedding is None:
            output_embed = nn.Embed(
                num_embeddings=config.output_vocab_size,
                features=config.emb_dim,
                embedding_init=_named(
                    config,
                    nn.initializers.normal(stddev=1.0),
                    ("vocab", "embed"),
                ),
            )
        else:
            output_embed = self.shared_embedding

        y = inputs.astype("int32")
        if not config.decode:
            y = shift_inputs(y, segment_ids=inputs_segmentation)
        y = output_embed(y)
        y = AddPositionEmbs(
            config=config, decode=config.decode, name="posembed_output"
        )(y, inputs_positions=inputs_positions)
        y = nn.Dropout(rate=config.dropout_rate)(
            y, deterministic=config.deterministic
        )

        y = y.astype(config.dtype)

        # Target-Input Decoder
        for lyr in range(config.num_layers):
            y = EncoderDecoder1DBlock(
                config=config, name=f"encoderdecoderblock_{lyr}"
            )(
                y,
                decoder_mask=decoder_mask,
                encoder_decoder_mask=encoder_decoder_mask,
            )
        y = nn.LayerNorm(dtype=config.dtype, name="encoderdecoder_norm")(y)

        # Decoded Logits
        if config.logits_via_embedding:
            # Use the transpose of embedding matrix for logit transform.
            logits = output_embed.attend(y.astype(jnp.float32))
            # Correctly normalize pre-softmax logits for this shared case.
            logits = logits / jnp.sqrt(y.shape[-1])
        else:
            logits = nn.Dense(
                config.output_vocab_size,
                dtype=config.dtype,
                kernel_init=_named(
                    config, config.kernel_init, ("embed", "vocab")
                ),
                bias_init=_named(config, config.bias_init, ("vocab",)),
                name="logitdense",
            )(y)
        return logits


class TransformerLM(nn.Module):
    """Transformer pure decoder stack for language modelling."""

    config: TransformerConfig

    @nn.compact
    def __call__(self, inputs, inputs_positions=None, inputs_segmentation=None):
        """Applies TransformerLM on the inputs.

        Args:
          inputs: target data.
          inputs_positions: input subsequence positions for packed examples.
          inputs_segmentation: input segmentation info for packed examples.

        Returns:
          logits array from transformer decoder.
        """
        config = self.config

        # Make padding attention masks.
        if config.decode:
            # for fast autoregressive decoding we use no decoder mask
            decoder_mask = None
        else:
            decoder_mask = nn.combine_masks(
                nn.make_attention_mask(
                    inputs > 0, inputs > 0, dtype=config.dtype
                ),
                nn.make_causal_mask(inputs, dtype=config.dtype),
            )

        # Add segmentation block-diagonal attention masks if using segmented
        # data.
        if inputs_segmentation is not None:
            decoder_mask = nn.combine_masks(
                decoder_mask,
                nn.make_attention_mask(
                    inputs_segmentation,
                    inputs_segmentation,
                    jnp.equal,
                    dtype=config.dtype,
                ),
            )

        logits = Decoder(config=config, shared_embedding=None, name="decoder")(
            inputs,
            inputs_positions=inputs_positions,
            inputs_segmentation=inputs_segmentation,
            decoder_mask=decoder_mask,
            encoder_decoder_mask=None,
        )
        return logits.astype(self.config.dtype)


# ---------------------------------------------------------------------------
# temperature_sampler.py
# ---------------------------------------------------------------------------

# The default End-of-Sentence token id is 2 (SentencePiece).
EOS_ID = 2


def temperature_sample(
    prompt_inputs,
    init_cache,
    tokens_to_logits,
    prng_key,
    temperature=1.0,
    topk=20,
    eos_token=EOS_ID,
):
    """Temperature sampling for language model generation.

    Args:
      prompt_inputs: [batch_size, max_decode_len] int32 sequence of tokens.
      init_cache: flax attention cache.
      tokens_to_logits: fast autoregressive decoder function taking single
        token slices and cache and returning next-token logits and updated
        cache.
      prng_key: JAX PRNGKey.
      temperature: sampling temperature factor.
      topk: if nonzero only use the top-k logits to sample next token.
      eos_token: end-of-sentence token for target vocabulary.

    Returns:
      Array of sampled sequences: [batch_size, max_decode_len]
    """
    batch_size = prompt_inputs.shape[0]
    max_decode_len = prompt_inputs.shape[1]
    end_marker = jnp.array(eos_token)
    temperature = jnp.array(temperature)

    # Initialize sampling loop state.
    rng0 = prng_key
    i0 = jnp.array(-1)
    token0 = jnp.zeros((batch_size, 1), dtype=jnp.int32)
    ended0 = jnp.zeros((batch_size, 1), dtype=jnp.bool_)
    sequences0 = prompt_inputs
    sampling_loop_init_state = (
        i0,
        sequences0,
        init_cache,
        token0,
        ended0,
        rng0,
    )

    def sampling_loop_cond_fn(state):
        """Sampling loop termination condition."""
        (i, _, _, _, ended, _) = state
        not_at_end = i < max_decode_len - 1
        all_sequences_ended = jnp.all(ended)
        return not_at_end & (~all_sequences_ended)

    def sampling_loop_body_fn(state):
        """Sampling loop state update."""
        i, sequences, cache, cur_token, ended, rng = state
        rng1, rng2 = random.split(rng)
        logits, new_cache = tokens_to_logits(cur_token, cache)
        if topk:
            topk_logits, topk_idxs = lax.top_k(logits, topk)
            topk_token = jnp.expand_dims(
                random.categorical(rng1, topk_logits / temperature).astype(
                    jnp.int32
                ),
                axis=-1,
            )
            next_token = jnp.squeeze(
                jnp.take_along_axis(topk_idxs, topk_token, axis=-1), axis=-1
            )
        else:
            next_token = random.categorical(rng1, logits / temperature).astype(
                jnp.int32
            )
        # Only use sampled tokens if we're past provided prefix tokens.
        out_of_prompt = sequences[:, i + 1] == 0
        next_token = (
            next_token * out_of_prompt + sequences[:, i + 1] * ~out_of_prompt
        )
        # If end-marker reached for batch item, only emit padding tokens.
        next_token_or_endpad = next_token[:, None] * ~ended
        ended |= next_token_or_endpad == end_marker
        new_sequences = lax.dynamic_update_slice(
            sequences, next_token_or_endpad, (0, i + 1)
        )
        return (
            i + 1,
            new_sequences,
            new_cache,
            next_token_or_endpad,
            ended,
            rng2,
        )

    final_state = lax.while_loop(
        sampling_loop_cond_fn, sampling_loop_body_fn, sampling_loop_init_state
    )
    return final_state[1]
