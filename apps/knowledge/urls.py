from django.urls import path

from apps.knowledge import views

app_name = "knowledge"

urlpatterns = [
    path("p/<slug:project>/knowledge/", views.kb_list, name="kb-list"),
    path("p/<slug:project>/knowledge/new/", views.kb_create, name="kb-create"),
    path("p/<slug:project>/knowledge/<int:pk>/", views.kb_detail, name="kb-detail"),
    path("p/<slug:project>/knowledge/<int:pk>/upload/", views.kb_upload, name="kb-upload"),
    path("p/<slug:project>/knowledge/<int:pk>/share/", views.kb_share, name="kb-share"),
    path("p/<slug:project>/knowledge/<int:pk>/delete/", views.kb_delete, name="kb-delete"),
    path("p/<slug:project>/knowledge/<int:pk>/search/", views.kb_search, name="kb-search"),
    path("p/<slug:project>/knowledge/<int:pk>/chat/", views.kb_chat, name="kb-chat"),
    path("p/<slug:project>/knowledge/<int:pk>/chat/stream/", views.kb_chat_stream, name="kb-chat-stream"),
    path("p/<slug:project>/knowledge/documents/<int:pk>/", views.document_detail, name="document-detail"),
    path("p/<slug:project>/knowledge/documents/<int:pk>/delete/", views.document_delete, name="document-delete"),
    path("p/<slug:project>/knowledge/documents/<int:pk>/reingest/", views.document_reingest, name="document-reingest"),
]
