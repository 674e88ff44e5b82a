ENGINE_NAME = "placeholder"
