"""The code's own shape: module counts along a request's path, function sizes."""
