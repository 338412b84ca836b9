"""Long-term memory: stable facts about a user, an agent or a tenant, recalled by hybrid search.

This package holds what every backend shares: the protocol callers type against
(``protocol``), the base class that implements it once over small hooks (``base_store``,
``store_hooks``, ``store_values``, ``recording``), fusion of the legs (``fusion``) and access
metadata (``access``). Each backend is a subpackage: ``files`` and ``qdrant``.
"""
