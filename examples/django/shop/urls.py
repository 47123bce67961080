"""The shop's URLs: the admin, the order views, and the jobs dashboard behind the admin login."""

from django.contrib import admin
from django.urls import include, path
from orders import views

import jobyard.django

urlpatterns = [
    path("admin/", admin.site.urls),
    path("orders/", views.place_order, name="place-order"),
    path("orders/<int:order_id>", views.order, name="order"),
    path("jobs/", include(jobyard.django.dashboard_urls())),
]
