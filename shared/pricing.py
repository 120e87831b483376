"""The price table (`pricing:` in config.yaml): dollars per million tokens per model, and costs.

A model's price is looked up by its exact configured name, then by the name after a provider
prefix ("openai/gpt-4o-mini" → "gpt-4o-mini"). A model found in neither the configuration nor
the defaults has no price: its calls' cost is unknown (None), never a guess. Cached input
tokens are part of the input the endpoint reports; they cost `cached` (the input price when a
model has no cached price) and the rest of the input costs `input`.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field

PER = 1_000_000


class ModelPrice(BaseModel):
    """Dollars per million tokens: input, output, and cached input (default: the input price)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cached: float | None = Field(default=None, ge=0)


def _price(input: float, output: float, cached: float | None = None) -> ModelPrice:
    return ModelPrice(input=input, output=output, cached=cached)


# List prices (USD per million tokens) as the providers published them in 2025. A fleet's own
# contract prices go in config.yaml, where they win over these.
DEFAULT_PRICES: dict[str, ModelPrice] = {
    "offline": _price(0, 0, 0),
    "gpt-5": _price(1.25, 10.0, 0.125),
    "gpt-5-mini": _price(0.25, 2.0, 0.025),
    "gpt-5-nano": _price(0.05, 0.40, 0.005),
    "gpt-4.1": _price(2.0, 8.0, 0.50),
    "gpt-4.1-mini": _price(0.40, 1.60, 0.10),
    "gpt-4.1-nano": _price(0.10, 0.40, 0.025),
    "gpt-4o": _price(2.50, 10.0, 1.25),
    "gpt-4o-mini": _price(0.15, 0.60, 0.075),
    "o3": _price(2.0, 8.0, 0.50),
    "o4-mini": _price(1.10, 4.40, 0.275),
    "claude-opus-4": _price(15.0, 75.0, 1.50),
    "claude-sonnet-4": _price(3.0, 15.0, 0.30),
    "claude-sonnet-4.5": _price(3.0, 15.0, 0.30),
    "claude-haiku-4.5": _price(1.0, 5.0, 0.10),
    "claude-3.5-haiku": _price(0.80, 4.0, 0.08),
    "gemini-2.5-pro": _price(1.25, 10.0, 0.31),
    "gemini-2.5-flash": _price(0.30, 2.50, 0.075),
}


class Pricing:
    """The defaults under the configured prices; `cost` of one call, or None when unknown."""

    def __init__(self, configured: Mapping[str, ModelPrice] | None = None) -> None:
        self._prices = {**DEFAULT_PRICES, **(configured or {})}

    def price_of(self, model: str) -> ModelPrice | None:
        found = self._prices.get(model)
        if found is None and "/" in model:
            found = self._prices.get(model.rsplit("/", 1)[1])
        return found

    def cost(
        self, model: str, input_tokens: int, output_tokens: int, cached_tokens: int | None
    ) -> float | None:
        """Dollars for one call, or None when the model has no price."""
        price = self.price_of(model)
        if price is None:
            return None
        cached = min(max(cached_tokens or 0, 0), input_tokens)
        cached_rate = price.input if price.cached is None else price.cached
        dollars = (
            (input_tokens - cached) * price.input
            + cached * cached_rate
            + output_tokens * price.output
        )
        return dollars / PER
