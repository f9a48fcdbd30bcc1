"""Per-card GPU accounting: which cards of a node a GPU pod takes (docs/gpu-sharing.md)."""

from policies.gpu.cards import (
    CARDS_STATE,
    DEFAULT_RULE,
    RULE_STATE,
    RULES,
    card_fit,
    choose_cards,
    planned_cards,
)

__all__ = ["CARDS_STATE", "DEFAULT_RULE", "RULES", "RULE_STATE", "card_fit", "choose_cards", "planned_cards"]
