app_name = "datasets"

urlpatterns: list = []
