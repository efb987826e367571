"""`GET /api/v1/search/?q=`: the navbar search box's twin (apps/console/search.py)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import permissions, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.console import search
from apps.projects.api.base import TokenScopePermission, request_token


class SearchQuerySerializer(serializers.Serializer):
    q = serializers.CharField(max_length=search.MAX_QUERY, help_text="A name, or part of one; `#3` or `iris #3`: a run")


class HitSerializer(serializers.Serializer):
    name = serializers.CharField()
    url = serializers.CharField(help_text="The object's page")
    project = serializers.CharField(help_text="The project's name; empty for a project")
    project_slug = serializers.CharField()
    detail = serializers.CharField(help_text="A run's status; empty otherwise")


class GroupSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(choices=[kind for kind, _label in search.kinds()])
    hits = HitSerializer(many=True)
    more = serializers.BooleanField(help_text="More of this kind matched than are listed")


class SearchResultSerializer(serializers.Serializer):
    query = serializers.CharField()
    groups = GroupSerializer(many=True)


class SearchView(APIView):
    """Projects, pipelines, runs, datasets, models and services whose name contains `q`, in the projects you may view
    (a project-limited token: its project only); at most 8 of each kind."""

    permission_classes = [permissions.IsAuthenticated, TokenScopePermission]

    @extend_schema(parameters=[SearchQuerySerializer], responses=SearchResultSerializer)
    def get(self, request: Request) -> Response:
        params = SearchQuerySerializer(data=request.query_params)
        params.is_valid(raise_exception=True)
        token = request_token(request)
        groups = search.search(
            request.user, params.validated_data["q"], project_id=token.project_id if token is not None else None
        )
        return Response(SearchResultSerializer({"query": params.validated_data["q"], "groups": groups}).data)
