"""The API's typed bodies, one module per resource.

Requests are ``Strict`` (an unknown field is a 422) and take their limits from
``memory_service.domain.limits``, so OpenAPI documents them. Responses are ``Out`` models: they map
the domain objects the services return (``Model.model_validate(domain_obj)``, attributes read
by ``from_attributes``), so a domain field and its JSON are never copied out by hand.
"""
