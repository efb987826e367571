from django.urls import path

from apps.retraining import views

app_name = "retraining"

urlpatterns = [
    path("p/<slug:project>/retraining/", views.policy_list, name="policy-list"),
    path("p/<slug:project>/retraining/policies/new/", views.policy_create, name="policy-create"),
    path("p/<slug:project>/retraining/policies/<int:pk>/edit/", views.policy_edit, name="policy-edit"),
    path("p/<slug:project>/retraining/policies/<int:pk>/trigger/", views.policy_trigger, name="policy-trigger"),
    path("p/<slug:project>/retraining/policies/<int:pk>/delete/", views.policy_delete, name="policy-delete"),
    path("p/<slug:project>/retraining/monitors/new/", views.monitor_create, name="monitor-create"),
    path("p/<slug:project>/retraining/monitors/<int:pk>/", views.monitor_detail, name="monitor-detail"),
    path("p/<slug:project>/retraining/monitors/<int:pk>/delete/", views.monitor_delete, name="monitor-delete"),
    path("p/<slug:project>/retraining/decisions/", views.decision_list, name="decision-list"),
    path("p/<slug:project>/retraining/decisions/<int:pk>/approve/", views.decision_approve, name="decision-approve"),
    path("p/<slug:project>/retraining/decisions/<int:pk>/reject/", views.decision_reject, name="decision-reject"),
    path("p/<slug:project>/retraining/decisions/<int:pk>/rollback/", views.decision_rollback, name="decision-rollback"),
]
