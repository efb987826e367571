from __future__ import annotations

from django.db.models import QuerySet
from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import generics, mixins, permissions, serializers, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from apps.accounts import services
from apps.accounts.api.serializers import (
    ApiTokenSerializer,
    MarkReadSerializer,
    NewApiTokenSerializer,
    NotificationSerializer,
    ProfileSerializer,
)
from apps.accounts.filters import ApiTokenFilterSet, NotificationFilterSet
from apps.accounts.models import ApiToken, Notification
from apps.accounts.throttles import TokenCreateRateThrottle
from apps.projects.api.base import TokenScopePermission, request_token

USER_PERMISSIONS = [permissions.IsAuthenticated, TokenScopePermission]


class AccountWritePermission(permissions.BasePermission):
    """A token limited to one project is a key to that project, not to the account: it cannot change it."""

    message = _("A project token cannot change the account; use an unlimited token or the web pages.")

    def has_permission(self, request: Request, view: object) -> bool:
        token = request_token(request)
        return request.method in permissions.SAFE_METHODS or token is None or token.project_id is None


class ApiTokenViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.DestroyModelMixin,
    viewsets.GenericViewSet,
):
    """Your API tokens. The raw token appears once, in the create response; DELETE revokes."""

    serializer_class = ApiTokenSerializer
    permission_classes = USER_PERMISSIONS
    throttle_classes = [TokenCreateRateThrottle]  # counts only creations (POST): 429 with Retry-After past the limit
    filterset_class = ApiTokenFilterSet
    ordering_fields = ["name", "created_at", "expires_at", "last_used_at"]  # as ApiTokenFilterSet (?search= too)

    def get_queryset(self) -> QuerySet[ApiToken]:
        if getattr(self, "swagger_fake_view", False):
            return ApiToken.objects.none()
        tokens = ApiToken.objects.filter(user=self.request.user).select_related("project")
        token = request_token(self.request)
        if token is not None and token.project_id is not None:
            tokens = tokens.filter(project_id=token.project_id)  # a project token sees its project's tokens
        return tokens

    def get_serializer_class(self) -> type:
        return NewApiTokenSerializer if self.action == "create" else ApiTokenSerializer

    def perform_create(self, serializer: NewApiTokenSerializer) -> None:
        data = serializer.validated_data
        token, raw = services.create_token(
            self.request.user,
            name=data["name"],
            project=data.get("project"),
            scope=data.get("scope", ApiToken.Scope.WRITE),
            days=data.get("days"),
            expires_at=data.get("expires_at"),
            via=request_token(self.request),
        )
        token.token = raw
        serializer.instance = token

    def perform_destroy(self, instance: ApiToken) -> None:
        services.revoke_token(instance)


class NotificationViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Your notifications, newest first."""

    serializer_class = NotificationSerializer
    permission_classes = USER_PERMISSIONS
    filterset_class = NotificationFilterSet

    def get_queryset(self) -> QuerySet[Notification]:
        if getattr(self, "swagger_fake_view", False):
            return Notification.objects.none()
        return Notification.objects.filter(user=self.request.user)

    @extend_schema(
        request=MarkReadSerializer,
        responses=inline_serializer(
            "MarkReadResult", {"marked": serializers.IntegerField(), "unread": serializers.IntegerField()}
        ),
    )
    @action(detail=False, methods=["post"], url_path="mark-read")
    def mark_read(self, request: Request) -> Response:
        body = MarkReadSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        changed = services.mark_read(request.user, body.validated_data.get("ids"))
        return Response({"marked": changed, "unread": services.unread_count(request.user)})


class ProfileView(generics.RetrieveUpdateAPIView):
    """The signed-in user's profile."""

    serializer_class = ProfileSerializer
    permission_classes = [*USER_PERMISSIONS, AccountWritePermission]
    http_method_names = ["get", "patch", "head", "options"]

    def get_object(self):  # type: ignore[override]
        return self.request.user
