"""``/v1/privacy``: calibrate, convert, empirical. Thin HTTP layer over app.privacy.service
(same keys as ``dpicl privacy ... --json``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Depends
from pydantic import BaseModel

from app.api.json_route import JSONRoute
from app.api.auth import SCOPES, require
from app.api.errors import APIError
from app.api.schemas import PrivacyCalibration, PrivacyConversion, PrivacyEmpirical
from app.privacy import service
from app.privacy.errors import PrivacyInputError
from app.privacy.schemas import CalibrateRequest, ConvertRequest, EmpiricalRequest

# Pure computation on public numbers, but CPU a caller could spend: a key (any API scope) once keyed.
router = APIRouter(route_class=JSONRoute, prefix="/v1/privacy", tags=["privacy"], dependencies=[Depends(require(*SCOPES))])

def _call(fn: Callable[..., dict[str, Any]], body: BaseModel) -> dict[str, Any]:
    try:
        return fn(**body.model_dump(exclude_unset=False))
    except PrivacyInputError as exc:
        raise APIError(422, exc.message, param=exc.param, code="invalid_value") from None


@router.post("/calibrate", response_model=PrivacyCalibration, response_model_exclude_unset=True,
             summary="Solve temperature, clip, batch size or sigma for a target (epsilon, delta)")
def calibrate(body: CalibrateRequest) -> dict[str, Any]:
    return _call(service.calibrate, body)


@router.post("/convert", response_model=PrivacyConversion, response_model_exclude_unset=True,
             summary="RDP / zCDP / pure / GDP / Gaussian to (epsilon, delta), or back to mu / rho")
def convert(body: ConvertRequest) -> dict[str, Any]:
    return _call(service.convert, body)


@router.post("/empirical", response_model=PrivacyEmpirical, response_model_exclude_unset=True,
             summary="Empirical epsilon lower bound from attack counts or auditing accuracy")
def empirical(body: EmpiricalRequest) -> dict[str, Any]:
    return _call(service.empirical, body)
