from pipeline.labelstudio.front.app import main

main()
