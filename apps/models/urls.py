app_name = "models"

urlpatterns: list = []
