"""The report: one self-contained, interactive HTML page of a sweep folder.

``page`` renders what the sweep wrote (its rows, the figures' registry, the validation)
into one page that loads nothing from the network; ``html/app.js`` holds its widgets only
(the plots are plotly specs that the figure modules give).
"""
