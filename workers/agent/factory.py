"""Which agent a worker process runs, from settings: a model endpoint, or the offline model."""

from __future__ import annotations

from shared.db import Store
from shared.sections import Endpoint
from shared.settings import Settings
from workers.agent.auxiliary import Auxiliary, ModelAuxiliary, OfflineAuxiliary
from workers.agent.base import Agent
from workers.agent.client import ChatClient
from workers.agent.media import MediaProcessor, OpenAITranscriber, Transcriber, build_fetchers
from workers.agent.offline import OfflineAgent
from workers.agent.openai_agent import OpenAIAgent
from workers.agent.tools import memory, session_search
from workers.agent.tools.registry import ToolRegistry


def chat_client(settings: Settings, endpoint: Endpoint, *, stream: bool) -> ChatClient:
    model = settings.model
    return ChatClient(
        endpoint,
        timeout=model.timeout,
        retries=model.retries,
        backoff=model.retry_backoff_seconds,
        stream=stream,
        max_output_tokens=model.max_output_tokens,
    )


def build_auxiliary(settings: Settings) -> Auxiliary:
    """The auxiliary model (titles, summaries, image descriptions), or the offline heuristics."""
    endpoint = settings.auxiliary_endpoint
    if endpoint is None:
        return OfflineAuxiliary()
    return ModelAuxiliary(chat_client(settings, endpoint, stream=False))


def build_transcriber(settings: Settings) -> Transcriber | None:
    endpoint = settings.transcription_endpoint
    if endpoint is None:
        return None
    return OpenAITranscriber(chat_client(settings, endpoint, stream=False).sdk, endpoint.name)


def build_tools() -> ToolRegistry:
    return ToolRegistry([session_search.TOOL, memory.TOOL])


def build_agent(settings: Settings, store: Store) -> Agent:
    """The offline model until a model endpoint (`model.base_url`) is configured."""
    auxiliary = build_auxiliary(settings)
    fetchers = build_fetchers(settings)
    media = MediaProcessor(settings, fetchers, auxiliary, build_transcriber(settings), store)
    endpoint = settings.model_endpoint
    if endpoint is None:
        return OfflineAgent(latency=settings.model.offline_latency_ms / 1000, media=media)
    chat = chat_client(settings, endpoint, stream=settings.model.stream)
    return OpenAIAgent(settings, store, chat, auxiliary, build_tools(), media)
