"""What the template, warm pool and claim controllers share: resources, blueprints, ownership."""
