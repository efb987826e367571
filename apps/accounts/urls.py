from django.urls import path

from apps.accounts import oidc, views
from apps.accounts.throttles import login_rate_limited

app_name = "accounts"

urlpatterns = [
    path("login/", login_rate_limited(oidc.LoginView.as_view()), name="login"),
    path("logout/", oidc.LogoutView.as_view(), name="logout"),
    # Single sign-on (404 while OIDC_RP_CLIENT_ID is unset).
    path("oidc/authenticate/", oidc.OIDCAuthenticateView.as_view(), name="oidc-authenticate"),
    path("oidc/callback/", oidc.OIDCCallbackView.as_view(), name="oidc-callback"),
    path("profile/", views.profile, name="profile"),
    path("tokens/", views.token_list, name="tokens"),
    path("tokens/<int:pk>/revoke/", views.token_revoke, name="token-revoke"),
    path("notifications/", views.notification_list, name="notifications"),
]
