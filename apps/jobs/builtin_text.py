"""The built-in job templates' names, categories and descriptions, for makemessages. Generated from
fixtures/job_templates.yaml by `manage.py builtin_text`: do not edit (a test checks it is current)."""

from django.utils.translation import pgettext_lazy

TEXTS = (
    pgettext_lazy(
        "job template",
        "Shell script",
    ),
    pgettext_lazy(
        "job template",
        "general",
    ),
    pgettext_lazy(
        "job template",
        "Runs a script with /bin/sh -e in the task's output directory. Output streams as it comes; the script's exit code is the task's.",
    ),
    pgettext_lazy(
        "job template",
        "Python code",
    ),
    pgettext_lazy(
        "job template",
        "Runs Python source in the task interpreter (scikit-learn, numpy and joblib are available) in the output directory. Output streams; an uncaught exception or sys.exit(n) fails the task.",
    ),
    pgettext_lazy(
        "job template",
        "Load the iris dataset",
    ),
    pgettext_lazy(
        "job template",
        "data",
    ),
    pgettext_lazy(
        "job template",
        "Writes scikit-learn's bundled iris dataset (150 rows, 4 features, 3 classes; no download) as data.csv with a header.",
    ),
    pgettext_lazy(
        "job template",
        "Load a dataset version",
    ),
    pgettext_lazy(
        "job template",
        'Copies a CSV file of a dataset version to data.csv for the next nodes. The dataset argument ("iris", "iris@latest" or "iris@2") becomes a read-only local folder of that version when the task starts, and the run records which version it read.',
    ),
    pgettext_lazy(
        "job template",
        "Train/test split",
    ),
    pgettext_lazy(
        "job template",
        "Splits a CSV into train.csv and test.csv, optionally stratified by a label column, and prints the row counts. Reads the upstream node's data.csv unless an input is given.",
    ),
    pgettext_lazy(
        "job template",
        "Train a scikit-learn classifier",
    ),
    pgettext_lazy(
        "job template",
        "training",
    ),
    pgettext_lazy(
        "job template",
        "Trains logistic regression or a random forest on the upstream train.csv and saves model.joblib and params.json. Logs params and metrics to MLflow when mlflow is installed and MLFLOW_TRACKING_URI is set.",
    ),
    pgettext_lazy(
        "job template",
        "Train a classifier by SGD, logging each epoch",
    ),
    pgettext_lazy(
        "job template",
        "Trains a linear classifier (scikit-learn's SGDClassifier on standardised features) one epoch at a time on the upstream train.csv and logs val_accuracy on the upstream test.csv at every epoch to MLflow, so a study's pruner stops poor trials while they train. Saves model.joblib and params.json like sklearn-train.",
    ),
    pgettext_lazy(
        "job template",
        "Evaluate a classifier",
    ),
    pgettext_lazy(
        "job template",
        "evaluation",
    ),
    pgettext_lazy(
        "job template",
        "Scores the upstream model.joblib on the upstream test.csv and writes metrics.json (accuracy, macro F1, per-class support/predicted/correct counts). Can fail the run below a minimum accuracy, and can score a champion model on the same test rows for a champion/challenger gate.",
    ),
    pgettext_lazy(
        "job template",
        "Optimise a model with ONNX (INT8, FP16)",
    ),
    pgettext_lazy(
        "job template",
        "models",
    ),
    pgettext_lazy(
        "job template",
        'Converts a registered scikit-learn or PyTorch model to ONNX (skl2onnx, torch.onnx), quantises it with onnxruntime (dynamic INT8) and to FP16, measures accuracy on a dataset version\'s held-out rows, latency and size of the original and of each variant in one table logged to tracking (optimisation.json and a metric per cell), and registers the chosen variant as a new version of flavour onnx, tagged with the version it came from; a service serves it like any other. Runs in the "train" task environment (`make train-env`). docs/optimisation.md.',
    ),
    pgettext_lazy(
        "job template",
        "Explain a model (feature importance)",
    ),
    pgettext_lazy(
        "job template",
        "Global feature importance of a registered scikit-learn model on a dataset version's rows (at most max_rows): the mean absolute SHAP value per feature (TreeExplainer for tree ensembles, a model-agnostic explainer on a small background sample otherwise), or scikit-learn's permutation importance when shap is missing or fails. Logs explanation.json and a feature_importance.json table to tracking and tags the version, whose page shows the chart. Runs in the \"train\" task environment (`make train-env`). docs/explainability.md.",
    ),
    pgettext_lazy(
        "job template",
        "AutoML for tabular data",
    ),
    pgettext_lazy(
        "job template",
        "Searches scikit-learn classifiers (logistic regression, k-nearest neighbours, random forest, extra trees, histogram gradient boosting) and their hyperparameters with Optuna within a time budget, scoring each trial by cross-validation on the training rows; logs the leaderboard of every trial (estimator, params, score, seconds) to tracking as a table with metrics, and registers the best model, refitted and scored on held-out rows, as a new version that can be served, explained and optimised with ONNX. docs/automl.md.",
    ),
    pgettext_lazy(
        "job template",
        "Spark feature engineering",
    ),
    pgettext_lazy(
        "job template",
        "Feature engineering with PySpark on a dataset version's CSV: derived columns from Spark SQL expressions, standardised numeric columns, one-hot encoded categorical ones, the selected columns kept; writes data.csv for the next nodes and, with output_dataset, publishes it as that dataset's next version. Runs locally as local[N] (Java 17 or 21 needed) in the \"train\" task environment (`make train-env`), and on Kubernetes as a SparkApplication (spark-operator). docs/spark.md.",
    ),
    pgettext_lazy(
        "job template",
        "PyTorch DDP training (demo)",
    ),
    pgettext_lazy(
        "job template",
        'A small DistributedDataParallel loop on synthetic data, gloo on CPU by default; rank 0 writes model.pt and metrics.json. Applies the node\'s distributed strategy (ddp or fsdp, precision, gradient accumulation and checkpointing). Runs in the "train" task environment, which has torch (`make train-env`).',
    ),
    pgettext_lazy(
        "job template",
        "Fine-tune a chat model with LoRA",
    ),
    pgettext_lazy(
        "job template",
        'Trains a LoRA adapter of a chat model (default the packaged SmolLM2-135M-Instruct; a Hugging Face folder or a registered version, models:/name/3, also) on the answers of a JSONL instruction dataset (rows {"messages": [...]} or {"prompt", "completion"}), with transformers + peft and nothing downloaded. Logs params, the loss per step and the held-out loss and perplexity before and after to the tracking API, and saves the adapter (or merged weights) as the run\'s model with a card naming base, data and method; a model-register node registers it, the card as the version\'s description, and an `llm` service serves it. Runs in the "llm" task environment (`make llm-env`); fp32 on CPU, bf16/fp16 on GPUs that have them. A distributed job (PyTorchJob on Kubernetes): more than one replica trains with DDP. docs/llm.md.',
    ),
    pgettext_lazy(
        "job template",
        "Evaluate a fine-tuned chat model against its base",
    ),
    pgettext_lazy(
        "job template",
        'Scores the base and the tuned model (default the upstream fine-tune\'s model/ and heldout.jsonl) on held-out prompts - perplexity of the reference answers, exact match of greedy answers, and the share that match a format - and tracks them as two runs (base, tuned) with the same metrics, to compare in one table. Can fail the run below a minimum. Runs in the "llm" task environment.',
    ),
    pgettext_lazy(
        "job template",
        "TensorFlow multi-worker env check",
    ),
    pgettext_lazy(
        "job template",
        "distributed",
    ),
    pgettext_lazy(
        "job template",
        "Validates TF_CONFIG as MultiWorkerMirroredStrategy reads it (cluster roles, host:port addresses, this task's type and index) and prints this replica's role and the cluster size. Needs no TensorFlow.",
    ),
    pgettext_lazy(
        "job template",
        "Register a model",
    ),
    pgettext_lazy(
        "job template",
        "Registers the model an upstream training node tracked (its tracking.json) as a new version of a registered model in the project's registry, waits until it is ready, and moves an alias (e.g. staging) to it. Put it after an evaluation node so that only models that passed are registered.",
    ),
    pgettext_lazy(
        "job template",
        "Deploy a model version as a service",
    ),
    pgettext_lazy(
        "job template",
        "serving",
    ),
    pgettext_lazy(
        "job template",
        "Serves a registered model version as an inference service of the project through the portal's API: creates the service (or points an existing one at the version), rolls out a revision and waits until it serves. The version is the one an upstream node registered (model-register, automl, onnx-optimise), or models:/name/3; models:/name@alias makes the service follow that alias. Writes deployed.json (the service, its URL and revision). docs/serving.md.",
    ),
    pgettext_lazy(
        "job template",
        "Webhook notification",
    ),
    pgettext_lazy(
        "job template",
        "notification",
    ),
    pgettext_lazy(
        "job template",
        'POSTs a JSON message with the run\'s project, pipeline, run id and task to a webhook (a "text" field makes it work with Slack and Mattermost incoming webhooks). Fails on an HTTP error.',
    ),
)
