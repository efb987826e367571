import django_filters

from apps.projects.models import Membership, Project, ProjectSecret


class ProjectFilterSet(django_filters.FilterSet):
    name = django_filters.CharFilter(lookup_expr="icontains")

    class Meta:
        model = Project
        fields = ["slug", "name"]


class MembershipFilterSet(django_filters.FilterSet):
    project = django_filters.CharFilter(field_name="project__slug")
    user = django_filters.CharFilter(field_name="user__username")

    class Meta:
        model = Membership
        fields = ["project", "user"]


class ProjectSecretFilterSet(django_filters.FilterSet):
    project = django_filters.CharFilter(field_name="project__slug")
    name = django_filters.CharFilter(lookup_expr="icontains")

    class Meta:
        model = ProjectSecret
        fields = ["project", "name"]
