"""The offline recall lab, one module per question; shared loading and scoring in ``common``."""
