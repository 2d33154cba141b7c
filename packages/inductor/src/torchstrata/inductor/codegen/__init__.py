"""Code generators: the backend interface and what C++ and Triton share."""
