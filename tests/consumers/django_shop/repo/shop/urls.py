from django.http import HttpRequest, JsonResponse
from django.urls import path

from orders import views


def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"ok": True})


urlpatterns = [
    path("webhooks/stripe", views.stripe_webhook),
    path("healthz", healthz),
]
