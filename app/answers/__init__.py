"""The private-answer service: replay, reuse, precheck, model work, charge and release for every
mechanism (classification and generation), below the HTTP layer. Routes and the OpenAI-compatible
endpoint only translate HTTP to these calls and ``app.answers.errors`` back to HTTP
(app/api/errors.py). It imports no FastAPI (tests/test_layering.py)."""
