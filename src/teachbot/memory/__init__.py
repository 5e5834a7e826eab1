"""Episodic memory: interaction examples (seed and learned), sentence embeddings and retrieval.

Pure Python, no ROS. ``EpisodicMemory.open()`` builds everything from config/memory.yaml.
"""

from teachbot.errors import MemoryStoreError
from teachbot.memory.config import MemoryConfig
from teachbot.memory.embedding import CachedEmbedder, Embedder, EmbeddingCache, SentenceTransformerEmbedder, cached
from teachbot.memory.episodic import EpisodicMemory
from teachbot.memory.example import LEARNED, SEED, InteractionExample, UnknownExampleError
from teachbot.memory.retrieval import RetrievalConfig, Retrieved, Retriever, query_vector
from teachbot.memory.store import MemoryStore
from teachbot.memory.store_protocol import ImportReport

__all__ = [
    "LEARNED",
    "SEED",
    "CachedEmbedder",
    "Embedder",
    "EmbeddingCache",
    "EpisodicMemory",
    "ImportReport",
    "InteractionExample",
    "MemoryConfig",
    "MemoryStore",
    "MemoryStoreError",
    "RetrievalConfig",
    "Retrieved",
    "Retriever",
    "SentenceTransformerEmbedder",
    "UnknownExampleError",
    "cached",
    "query_vector",
]
