from django.urls import path

from apps.alerts import views

app_name = "alerts"

urlpatterns = [
    path("p/<slug:project>/alerts/", views.rule_list, name="rule-list"),
    path("p/<slug:project>/alerts/rules/new/", views.rule_create, name="rule-create"),
    path("p/<slug:project>/alerts/rules/<int:pk>/", views.rule_edit, name="rule-edit"),
    path("p/<slug:project>/alerts/rules/<int:pk>/delete/", views.rule_delete, name="rule-delete"),
    path("p/<slug:project>/alerts/channels/", views.channel_list, name="channel-list"),
    path("p/<slug:project>/alerts/channels/new/", views.channel_create, name="channel-create"),
    path("p/<slug:project>/alerts/channels/<int:pk>/", views.channel_edit, name="channel-edit"),
    path("p/<slug:project>/alerts/channels/<int:pk>/delete/", views.channel_delete, name="channel-delete"),
    path("p/<slug:project>/alerts/channels/<int:pk>/test/", views.channel_test, name="channel-test"),
    path("p/<slug:project>/alerts/history/", views.event_list, name="event-list"),
]
