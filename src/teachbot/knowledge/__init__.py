"""Distilled knowledge from corrections (DROC): entries, their durable store, visual descriptors and retrieval.

Pure Python, no ROS. A ``KnowledgeEntry`` is one short reusable fact (a task or robot constraint, a
preference, a skill parameter, an object's information or state); ``KnowledgeStore`` keeps them one
JSON file each with the example store's guarantees; ``KnowledgeRetriever`` picks those a new task needs,
by task similarity and by how alike the object at hand looks; ``render`` writes the "What I know" block.
``CorrectionHandler`` tells plan-level from skill-level corrections and grounds the latter in the object's
scale (``grounding``); ``KnowledgeExtractor`` distils entries from an interaction's corrections.
"""

from teachbot.knowledge.correction import Correction, CorrectionHandler, SkillCall
from teachbot.knowledge.descriptor import (
    ColourDepthDescriptor,
    DescriptorConfig,
    ImageEmbedder,
    TransformersImageEmbedder,
    cosine,
    crop_object,
    describe,
    similarity,
)
from teachbot.knowledge.entry import DEFAULT_SCOPE, KINDS, SCOPES, KnowledgeEntry, KnowledgeError, Provenance, UnknownEntryError
from teachbot.knowledge.extractor import ExtractionConfig, KnowledgeExtractor
from teachbot.knowledge.grounding import CorrectionConfig
from teachbot.knowledge.retriever import KnowledgeConfig, KnowledgeRetriever, RetrievedKnowledge, render, select_with_model
from teachbot.knowledge.store import KnowledgeStore
from teachbot.knowledge.store_protocol import KnowledgeImportReport

__all__ = [
    "DEFAULT_SCOPE",
    "KINDS",
    "SCOPES",
    "ColourDepthDescriptor",
    "Correction",
    "CorrectionConfig",
    "CorrectionHandler",
    "DescriptorConfig",
    "ExtractionConfig",
    "ImageEmbedder",
    "KnowledgeConfig",
    "KnowledgeEntry",
    "KnowledgeError",
    "KnowledgeExtractor",
    "KnowledgeImportReport",
    "KnowledgeRetriever",
    "KnowledgeStore",
    "Provenance",
    "RetrievedKnowledge",
    "SkillCall",
    "TransformersImageEmbedder",
    "UnknownEntryError",
    "cosine",
    "crop_object",
    "describe",
    "render",
    "select_with_model",
    "similarity",
]
