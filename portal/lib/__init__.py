"""Model-free helpers shared by the project and its apps."""
